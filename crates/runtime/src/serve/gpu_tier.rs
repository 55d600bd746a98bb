//! The VRAM tier inside the serving loop (Colibri's qwen36 design as the
//! baseline): experts with a copy on the card are
//! computed there by the PTX GEMV kernel, every other one takes the CPU
//! path, and both run at once, as an engine overlaps them.
//!
//! Per layer: the card's share goes out in one batched launch before the
//! CPU starts its own, and the layer waits once for the card. Which
//! experts have copies is [`VramResidency`]'s decision. It is fed each
//! token's routes after the token. Its uploads run on a thread of their
//! own, through the CUDA tier's own uploader (`gpu::cuda`: a stream,
//! pinned staging buffers, a memory pool), from the RAM tier's bytes, so
//! a promotion never stalls a token. An expert that has left RAM is not
//! read from the drive for its copy: its upload is skipped until the CPU
//! loads it again. An expert is computed on the card only
//! once its copy has landed.
//!
//! The card's sums run in another order than the CPU's, so its outputs
//! agree with the CPU's to rounding, not bit for bit.

use super::compute::{ExpertKernel, LayerInput};
use super::replan::MoveLink;
use super::vram::{CardKnowledge, VramPolicy, VramResidency};
use crate::gemv::{Packing, ProjectionAt};
use crate::gpu::cuda::CudaDevice;
use crate::gpu::gemv::{CudaGemv, DeviceInput, GemvKernels, GemvLaunch};
use crate::gpu::{Device, DeviceBuffer, GpuOptions};
use cudarc::driver::CudaSlice;
use residency_policy::online::{LayerShape, OnlineParams};
use residency_policy::{ObjectIndex, PolicyParams};
use std::collections::BTreeMap;
use std::sync::Arc;

residency_core::named! {
    /// How the card's budget is held: one cache for every expert, or one a
    /// MoE layer whose budgets the online allocator moves.
    pub enum VramAllocation("VRAM allocation") {
        Global = "global",
        Dynamic = "dynamic",
    }
}

/// What `replay --vram-budget` sets.
#[derive(Debug, Clone, PartialEq)]
pub struct VramConfig {
    pub budget_bytes: u64,
    /// What decides the card's residents (`lfru`: Colibri's rule).
    pub policy: VramPolicy,
    pub allowance_bytes_per_token: u64,
    /// `lfru`'s heat is halved every this many requests.
    pub halve_every_ticks: u64,
    /// `dynamic` on the card: one cache a layer, budgets moved between
    /// layers by this online allocator; `None`: one cache for all.
    pub dynamic: Option<OnlineParams>,
    /// An upload's link, RAM to the card: what a move costs `cost` and
    /// `replan`.
    pub link: MoveLink,
}

impl VramConfig {
    /// The residency of a tier of this configuration over experts of
    /// `sizes_bytes` in MoE layers `layers`, knowing `knowledge` (its
    /// decisions, without a card: the simulator's tier is this too).
    pub fn residency(
        &self,
        sizes_bytes: Vec<u64>,
        layers: Vec<LayerShape>,
        knowledge: &CardKnowledge,
    ) -> Result<VramResidency, String> {
        let params = PolicyParams {
            halve_every_ticks: self.halve_every_ticks,
            ..PolicyParams::default()
        };
        VramResidency::of_policy(
            self.policy,
            self.budget_bytes,
            sizes_bytes,
            layers,
            (params, self.dynamic.clone()),
            knowledge,
            self.allowance_bytes_per_token,
        )
    }
}

/// Whether a VRAM tier can run `kernel`'s experts here: a packed format,
/// and CUDA device 0 with the GEMV kernels loaded; else why not.
pub fn available(kernel: &ExpertKernel) -> Result<(), String> {
    if let ExpertKernel::Bytes { why } = kernel {
        return Err(why.clone());
    }
    CudaGemv::open(0)?.kernels().map(drop)
}

/// An upload's outcome: the expert, and its copy on the card (`None`: its
/// upload was skipped, its host copy gone from RAM).
pub type Landed = (ObjectIndex, Option<Arc<dyn DeviceBuffer>>);

/// One CUDA device computing a layer's resident experts, and their copies.
pub struct GpuTier<'k> {
    device: CudaGemv,
    kernels: GemvKernels,
    packing: Packing,
    projections: &'k [Vec<ProjectionAt>],
    residency: VramResidency,
    copies: Vec<Option<Arc<dyn DeviceBuffer>>>,
    /// One layer's outputs.
    y: CudaSlice<f32>,
    /// Experts computed on the card so far.
    pub computed: u64,
}

/// A layer's launch on the card: which of its experts, and where their
/// outputs lie in `y`.
pub struct Launched {
    /// (index in the layer's route, first output row, rows).
    outputs: Vec<(usize, usize, usize)>,
    rows: usize,
    /// The inputs the launch reads, kept until it is read back.
    _inputs: BTreeMap<usize, DeviceInput>,
}

impl<'k> GpuTier<'k> {
    /// CUDA device 0 holding at most `config.budget_bytes` of the experts of
    /// `sizes_bytes`, in MoE layers `layers`, whose routes take at most
    /// `widest_route` experts a layer; or why there is none.
    pub fn open(
        config: &VramConfig,
        kernel: &'k ExpertKernel,
        sizes_bytes: Vec<u64>,
        layers: Vec<LayerShape>,
        knowledge: &CardKnowledge,
        widest_route: usize,
    ) -> Result<GpuTier<'k>, String> {
        let (packing, projections) = match kernel {
            ExpertKernel::Packed {
                packing,
                projections,
                ..
            } => (packing, projections),
            ExpertKernel::Bytes { why } => return Err(why.clone()),
        };
        let device = CudaGemv::open(0)?;
        let kernels = device.kernels()?;
        let rows_per_expert = projections
            .iter()
            .map(|ps| ps.iter().map(|p| p.rows).sum::<usize>())
            .max()
            .unwrap_or(0);
        let y = device.output(rows_per_expert * widest_route.max(1))?;
        let residency = config.residency(sizes_bytes, layers, knowledge)?;
        Ok(GpuTier {
            copies: (0..projections.len()).map(|_| None).collect(),
            device,
            kernels,
            packing: *packing,
            projections,
            residency,
            y,
            computed: 0,
        })
    }

    /// Whether `o` is computed on the card now.
    pub fn holds(&self, o: ObjectIndex) -> bool {
        self.copies[o as usize].is_some()
    }

    /// Queues the GEMVs of the experts of `objects` (a layer's route) that
    /// the card holds, with `input`, on the card's stream; returns at once.
    pub fn launch(
        &mut self,
        objects: &[ObjectIndex],
        input: &LayerInput,
    ) -> Result<Launched, String> {
        let mut launched = Launched {
            outputs: Vec::new(),
            rows: 0,
            _inputs: BTreeMap::new(),
        };
        if !objects.iter().any(|&o| self.holds(o)) {
            // Nothing for the card: no input copies either.
            return Ok(launched);
        }
        let mut inputs = BTreeMap::new();
        for (cols, x) in input.quantized() {
            inputs.insert(cols, self.device.input(x)?);
        }
        let y = self.device.pointer(&self.y);
        let mut launches = Vec::new();
        let mut outputs = Vec::new();
        let mut row = 0;
        for (i, &o) in objects.iter().enumerate() {
            let Some(copy) = &self.copies[o as usize] else {
                continue;
            };
            let (_, base) = copy.device().expect("a device buffer has an address");
            let first = row;
            for p in &self.projections[o as usize] {
                let shape = GemvLaunch::shape(self.packing, p.layout, p.rows, p.cols);
                launches.push(shape.at(
                    base + p.weights.start as u64,
                    base + p.scales.start as u64,
                    &inputs[&p.cols],
                    y + (row * size_of::<f32>()) as u64,
                ));
                row += p.rows;
            }
            outputs.push((i, first, row - first));
        }
        if !launches.is_empty() {
            // SAFETY: every address is inside a copy this tier holds (kept
            // until `finish` has read the launch back), an input in
            // `inputs` (kept in the returned launch), or `y`, which holds a
            // widest route's rows.
            unsafe { self.kernels.launch(self.device.stream(), &launches) }?;
        }
        self.computed += outputs.len() as u64;
        launched.outputs = outputs;
        launched.rows = row;
        launched._inputs = inputs;
        Ok(launched)
    }

    /// Waits for `launched` and puts each expert's outputs at its index.
    pub fn finish(&self, launched: Launched, into: &mut [Vec<f32>]) -> Result<(), String> {
        if launched.outputs.is_empty() {
            return Ok(());
        }
        let y = self.device.read(&self.y, launched.rows)?;
        for (i, first, rows) in launched.outputs {
            into[i] = y[first..first + rows].to_vec();
        }
        Ok(())
    }

    /// After a token: copies that landed are kept ([`GpuTier::land`]), the
    /// token's routes go to the residency, its frees happen, and its
    /// uploads are returned for the uploader.
    pub fn after_token(
        &mut self,
        routes: &[ObjectIndex],
        landed: impl IntoIterator<Item = Landed>,
    ) -> Vec<ObjectIndex> {
        self.land(landed);
        let moves = self.residency.after_token(routes);
        for o in moves.frees {
            self.copies[o as usize] = None;
        }
        moves.uploads
    }

    /// Before serving: the experts the residency holds from the start, to
    /// upload and [`GpuTier::land`] before the first token.
    pub fn startup(&mut self) -> Vec<ObjectIndex> {
        self.residency.startup()
    }

    /// Copies that landed are kept, or freed if evicted in flight; `None`:
    /// skipped, its host copy gone from RAM.
    pub fn land(&mut self, landed: impl IntoIterator<Item = Landed>) {
        for (o, copy) in landed {
            match copy {
                None => self.residency.skipped(o),
                Some(copy) => {
                    if !self.residency.landed(o) {
                        self.copies[o as usize] = Some(copy);
                    }
                }
            }
        }
    }
}

/// Device 0 as the CUDA tier opens it for `apply` (its own stream, two
/// pinned staging buffers, a memory pool that keeps what is freed): the
/// card's copies are uploaded through it.
pub struct Uploader {
    device: CudaDevice,
}

impl Uploader {
    pub fn open() -> Result<Uploader, String> {
        let device = CudaDevice::open(0, &GpuOptions::default()).map_err(|e| e.to_string())?;
        Ok(Uploader { device })
    }

    /// `bytes` copied to the card, the copy finished.
    pub fn upload(&self, bytes: &[u8]) -> Result<Arc<dyn DeviceBuffer>, String> {
        self.device.upload(bytes).map_err(|e| e.to_string())
    }
}
