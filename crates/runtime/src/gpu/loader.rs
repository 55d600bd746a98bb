//! [`GpuLoader`]: a store loader that puts objects on their GPU. Another
//! loader reads each object into host memory (the checkpoint loader); for
//! an object whose home is a GPU place, the bytes are uploaded to that
//! place's device and the host copy is dropped, so the store holds (and its
//! budget for the place counts) device memory. Objects without a device
//! pass through untouched.

use super::{device_label, Device, DeviceBuffer, GpuError};
use crate::store::{Loader, ObjectBytes};
use residency_policy::ObjectIndex;
use std::sync::{Arc, Mutex, Weak};

pub struct GpuLoader {
    host: Arc<dyn Loader>,
    /// The device each object is uploaded to; `None`: it stays in host memory.
    devices: Vec<Option<Arc<dyn Device>>>,
    /// Each object's latest upload, for read-back while a lease keeps it.
    uploads: Vec<Mutex<Option<Weak<dyn DeviceBuffer>>>>,
}

impl GpuLoader {
    /// `devices[o]`: where object `o` goes (objects past the end stay in
    /// host memory).
    pub fn new(host: Arc<dyn Loader>, devices: Vec<Option<Arc<dyn Device>>>) -> GpuLoader {
        let uploads = devices.iter().map(|_| Mutex::new(None)).collect();
        GpuLoader {
            host,
            devices,
            uploads,
        }
    }

    fn device(&self, o: ObjectIndex) -> Option<&Arc<dyn Device>> {
        self.devices.get(o as usize)?.as_ref()
    }

    /// The bytes of object `o`, copied back from its device, where it is
    /// at `at` (`ObjectBytes::device` of what the store holds, e.g. a
    /// lease's).
    pub fn read_back(&self, o: ObjectIndex, at: (u32, u64)) -> Result<Vec<u8>, GpuError> {
        let upload = self
            .uploads
            .get(o as usize)
            .and_then(|u| u.lock().unwrap().as_ref()?.upgrade());
        // Whoever holds the object keeps its buffer alive, so the latest
        // upload is that one unless the object was dropped and loaded again.
        match upload.filter(|b| b.device() == Some(at)) {
            Some(buffer) => buffer.read_back(),
            None => Err(GpuError::Failed {
                device: self.device(o).map_or_else(
                    || format!("device {}", at.0),
                    |d| device_label(d.backend(), d.ordinal()),
                ),
                action: format!("reading back object {o}"),
                problem: "this loader holds no upload of it at that address".into(),
                fix:
                    "read back an object while a lease holds it, through the loader that loaded it"
                        .into(),
            }),
        }
    }
}

impl Loader for GpuLoader {
    fn size_bytes(&self, o: ObjectIndex) -> u64 {
        self.host.size_bytes(o)
    }

    fn load(&self, o: ObjectIndex) -> Result<Box<dyn ObjectBytes>, String> {
        let read = self.host.load(o)?;
        let (Some(device), Some(bytes)) = (self.device(o), read.host()) else {
            return Ok(read);
        };
        let buffer = device.upload(bytes).map_err(|e| e.to_string())?;
        *self.uploads[o as usize].lock().unwrap() = Some(Arc::downgrade(&buffer));
        Ok(Box::new(buffer))
    }
}
