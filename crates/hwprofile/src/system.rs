//! What sysfs and procfs say about this machine: NUMA nodes with their
//! memory and CPUs, the block device behind a directory, PCI devices with
//! their NUMA node and link; and pinning a thread to a CPU.
//!
//! Everything is read, nothing assumed: a reader returns what it found and
//! the file it found it in (for the profile's `detected:` comments), or
//! nothing, and the caller falls back to a documented default.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const NODE_DIR: &str = "/sys/devices/system/node";
const CPU_DIR: &str = "/sys/devices/system/cpu";

/// One NUMA node as this process may use it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    /// The kernel's node number (`node1` is 1).
    pub sysfs_id: u32,
    pub ram_bytes: u64,
    /// Where `ram_bytes` was read (`MemTotal 11757340 kB in ...`).
    pub ram_source: String,
    /// The node's CPUs this process may run on.
    pub cpus: Vec<u32>,
    /// One of those CPUs per physical core (the first hyperthread).
    pub core_cpus: Vec<u32>,
}

fn read_trimmed(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The machine's host name (`this-machine` when the kernel says none).
pub fn hostname() -> String {
    read_trimmed("/proc/sys/kernel/hostname")
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "this-machine".into())
}

/// `0-3,8,10-11` as CPU numbers.
pub fn parse_cpulist(text: &str) -> Vec<u32> {
    text.trim()
        .split(',')
        .filter(|p| !p.is_empty())
        .flat_map(|part| {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            match (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                (Ok(a), Ok(b)) if a <= b => (a..=b).collect(),
                _ => Vec::new(),
            }
        })
        .collect()
}

/// The CPUs this process may run on (its affinity mask, which a cpuset
/// cgroup or `taskset` narrows), or `None` where the kernel will not say.
pub fn allowed_cpus() -> Option<BTreeSet<u32>> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; the kernel writes
    // at most `size_of::<cpu_set_t>()` bytes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return None;
    }
    let bits = 8 * std::mem::size_of_val(&set);
    // SAFETY: every index is below the set's size in bits.
    Some(
        (0..bits)
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
            .map(|cpu| cpu as u32)
            .collect(),
    )
}

/// `MemTotal` (or another `key`) of a meminfo file, in bytes.
fn meminfo_bytes(path: &Path, key: &str) -> Option<(u64, String)> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let at = line.find(&format!("{key}:"))?;
        let rest = line[at + key.len() + 1..].trim();
        let kib: u64 = rest.strip_suffix("kB")?.trim().parse().ok()?;
        Some((kib * 1024, format!("{key} {kib} kB in {}", path.display())))
    })
}

/// Memory the kernel could give without swapping (`MemAvailable`), bytes.
pub fn available_bytes() -> Option<u64> {
    meminfo_bytes(Path::new("/proc/meminfo"), "MemAvailable").map(|(b, _)| b)
}

/// The memory limit of this process's cgroup, where one is set.
fn cgroup_memory_limit() -> Option<(u64, &'static str)> {
    [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .into_iter()
    .find_map(|path| {
        let limit: u64 = read_trimmed(path)?.parse().ok()?;
        // cgroup v1 says "no limit" with a number near 2^63.
        (limit < 1 << 60).then_some((limit, path))
    })
}

/// One CPU per physical core among `cpus` (the first of its hyperthreads),
/// by sysfs topology; each CPU its own core where topology is missing.
fn core_cpus(cpus: &[u32]) -> Vec<u32> {
    let mut seen = BTreeMap::new();
    for &cpu in cpus {
        let topology = format!("{CPU_DIR}/cpu{cpu}/topology");
        let key = match (
            read_trimmed(format!("{topology}/physical_package_id")),
            read_trimmed(format!("{topology}/core_id")),
        ) {
            (Some(package), Some(core)) => format!("{package}/{core}"),
            _ => format!("cpu{cpu}"),
        };
        seen.entry(key).or_insert(cpu);
    }
    let mut firsts: Vec<u32> = seen.into_values().collect();
    firsts.sort_unstable();
    firsts
}

/// The largest cache of `cpu` (its last level), in bytes.
pub fn largest_cache_bytes(cpu: u32) -> Option<u64> {
    let dir = format!("{CPU_DIR}/cpu{cpu}/cache");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let size = read_trimmed(e.path().join("size"))?;
            let (number, unit) = size.split_at(size.find(|c: char| !c.is_ascii_digit())?);
            let factor = match unit {
                "K" => 1 << 10,
                "M" => 1 << 20,
                _ => return None,
            };
            Some(number.parse::<u64>().ok()? * factor)
        })
        .max()
}

/// The NUMA nodes this process can use: each node's memory and allowed
/// CPUs. A node with no memory or no allowed CPU is left out (with a note
/// in `notes`); without NUMA in sysfs, the whole machine is one node.
pub fn numa_nodes(notes: &mut Vec<String>) -> Vec<NodeFacts> {
    let allowed = allowed_cpus();
    let allow = |cpus: Vec<u32>| -> Vec<u32> {
        match &allowed {
            Some(set) => cpus.into_iter().filter(|c| set.contains(c)).collect(),
            None => cpus,
        }
    };
    let mut ids: Vec<u32> = std::fs::read_dir(NODE_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
        .collect();
    ids.sort_unstable();
    let proc_total = meminfo_bytes(Path::new("/proc/meminfo"), "MemTotal");
    let mut nodes: Vec<NodeFacts> = Vec::new();
    if ids.is_empty() {
        // No NUMA in sysfs: the machine is one node.
        let cpus = allow(
            read_trimmed(format!("{CPU_DIR}/online"))
                .map(|t| parse_cpulist(&t))
                .unwrap_or_default(),
        );
        if let Some((ram_bytes, ram_source)) = proc_total.clone() {
            nodes.push(NodeFacts {
                sysfs_id: 0,
                ram_bytes,
                ram_source,
                core_cpus: core_cpus(&cpus),
                cpus,
            });
        }
    }
    for &id in &ids {
        let dir = PathBuf::from(format!("{NODE_DIR}/node{id}"));
        let cpus = allow(
            read_trimmed(dir.join("cpulist"))
                .map(|t| parse_cpulist(&t))
                .unwrap_or_default(),
        );
        // One node: /proc/meminfo is the whole machine (a VM's node file
        // can miss memory added after boot); several: each node's own.
        let ram = if ids.len() == 1 {
            proc_total.clone()
        } else {
            meminfo_bytes(&dir.join("meminfo"), "MemTotal")
        };
        let Some((ram_bytes, ram_source)) = ram.filter(|(b, _)| *b > 0) else {
            notes.push(format!("NUMA node {id} has no memory; left out"));
            continue;
        };
        if cpus.is_empty() {
            notes.push(format!(
                "NUMA node {id} has no CPU this process may use; left out (its memory cannot run expert GEMVs here)"
            ));
            continue;
        }
        nodes.push(NodeFacts {
            sysfs_id: id,
            ram_bytes,
            ram_source,
            core_cpus: core_cpus(&cpus),
            cpus,
        });
    }
    if let Some((limit, path)) = cgroup_memory_limit() {
        let total: u64 = nodes.iter().map(|n| n.ram_bytes).sum();
        if limit < total {
            for n in &mut nodes {
                n.ram_bytes = (n.ram_bytes as u128 * limit as u128 / total as u128) as u64;
                n.ram_source = format!(
                    "{}, scaled to this cgroup's limit of {limit} bytes ({path})",
                    n.ram_source
                );
            }
        }
    }
    nodes
}

/// A PCIe link: the rate and width it can train to.
#[derive(Debug, Clone, PartialEq)]
pub struct PcieLink {
    /// Transfer rate per lane, GT/s (the slower of device and port).
    pub gigatransfers: f64,
    pub width: u32,
    /// `0000:18:00.0: max 32.0 GT/s x16, now 2.5 GT/s x16; port max 32.0 GT/s x16`.
    pub detail: String,
}

impl PcieLink {
    /// PCIe generation of the rate (2.5 GT/s is 1, 32 GT/s is 5).
    pub fn generation(&self) -> u32 {
        [2.5, 5.0, 8.0, 16.0, 32.0, 64.0]
            .iter()
            .position(|&g| self.gigatransfers <= g + 0.1)
            .map_or(6, |i| i as u32 + 1)
    }

    /// Payload bytes per second in one direction, after line encoding
    /// (8b/10b up to 2.0, 128b/130b for 3.0 to 5.0, 242/256 FLITs for 6.0).
    pub fn bytes_per_s(&self) -> f64 {
        let encoding = match self.generation() {
            1 | 2 => 0.8,
            3..=5 => 128.0 / 130.0,
            _ => 242.0 / 256.0,
        };
        self.gigatransfers * 1e9 * encoding / 8.0 * self.width as f64
    }

    /// `PCIe 5.0 x16`.
    pub fn name(&self) -> String {
        format!("PCIe {}.0 x{}", self.generation(), self.width)
    }
}

/// A PCI device as sysfs shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct PciFacts {
    /// `0000:18:00.0`.
    pub bus_id: String,
    /// The node sysfs attaches the device to (`numa_node`), when it says one.
    pub numa: Option<u32>,
    pub link: Option<PcieLink>,
}

/// `32.0 GT/s PCIe` as GT/s.
fn link_speed(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The sysfs facts of PCI device `bus_id` (any case, with domain).
pub fn pci_facts(bus_id: &str) -> PciFacts {
    let bus_id = bus_id.to_lowercase();
    let dir = PathBuf::from("/sys/bus/pci/devices").join(&bus_id);
    let numa = read_trimmed(dir.join("numa_node")).and_then(|n| n.parse::<i64>().ok());
    let read_link = |dir: &Path, which: &str| -> Option<(f64, u32)> {
        Some((
            link_speed(&read_trimmed(dir.join(format!("{which}_link_speed")))?)?,
            read_trimmed(dir.join(format!("{which}_link_width")))?
                .parse()
                .ok()?,
        ))
    };
    let link = read_link(&dir, "max").map(|(max_gts, max_width)| {
        let now = read_link(&dir, "current");
        // The upstream port caps what the link can train to.
        let port = std::fs::canonicalize(&dir)
            .ok()
            .and_then(|real| real.parent().and_then(|p| read_link(p, "max")));
        let gigatransfers = port.map_or(max_gts, |(g, _)| g.min(max_gts));
        // The trained width, where the link is up; else what both ends offer.
        let width = now
            .map(|(_, w)| w)
            .filter(|&w| w > 0)
            .unwrap_or_else(|| port.map_or(max_width, |(_, w)| w.min(max_width)));
        let mut detail = format!("{bus_id}: max {max_gts:.1} GT/s x{max_width}");
        if let Some((g, w)) = now {
            detail.push_str(&format!(", now {g:.1} GT/s x{w}"));
        }
        if let Some((g, w)) = port {
            detail.push_str(&format!("; port max {g:.1} GT/s x{w}"));
        }
        PcieLink {
            gigatransfers,
            width,
            detail,
        }
    });
    PciFacts {
        bus_id,
        numa: numa.filter(|&n| n >= 0).map(|n| n as u32),
        link,
    }
}

/// The whole disk behind a directory, as sysfs shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockFacts {
    /// The disk's kernel name (`nvme0n1`, `sda`, `vda`, `dm-0`).
    pub name: String,
    /// How the directory reaches it: `ext4 on /dev/nvme0n1p2 (259:2)`.
    pub via: String,
    pub rotational: Option<bool>,
    pub model: Option<String>,
    /// The node its controller is attached to, when sysfs says one.
    pub numa: Option<u32>,
    /// Devices under a device-mapper or md disk.
    pub slaves: Vec<String>,
}

impl BlockFacts {
    pub fn is_nvme(&self) -> bool {
        self.name.starts_with("nvme")
    }
}

/// One line of /proc/self/mountinfo: device, file system, source, options.
struct Mount {
    major: u32,
    minor: u32,
    fs_type: String,
    source: String,
    super_options: String,
}

fn mounts() -> Vec<Mount> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let device = before.split(' ').nth(2)?;
            let (major, minor) = device.split_once(':')?;
            let mut after = after.split(' ');
            Some(Mount {
                major: major.parse().ok()?,
                minor: minor.parse().ok()?,
                fs_type: after.next()?.to_string(),
                source: after.next()?.to_string(),
                super_options: after.next().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// The disk that holds `dir`: its mount's device, else the device its
/// source names (btrfs shows anonymous numbers), else the upper directory
/// of an overlay. `Err` says why there is none (tmpfs, a network file
/// system), for the profile's comment.
pub fn block_device_of(dir: &Path) -> Result<BlockFacts, String> {
    block_device_at(dir, 0)
}

fn block_device_at(dir: &Path, depth: u32) -> Result<BlockFacts, String> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot stat {}: {e}", dir.display()))?;
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let all = mounts();
    let mount = all
        .iter()
        .find(|m| (m.major, m.minor) == (major, minor))
        .ok_or_else(|| format!("no mount in /proc/self/mountinfo has device {major}:{minor}"))?;
    let via = format!("{} on {} ({major}:{minor})", mount.fs_type, mount.source);
    let device = if major != 0 {
        Some((major, minor))
    } else if mount.source.starts_with("/dev/") {
        std::fs::metadata(&mount.source)
            .ok()
            .filter(|m| m.rdev() != 0)
            .map(|m| (libc::major(m.rdev()), libc::minor(m.rdev())))
    } else {
        None
    };
    if let Some((major, minor)) = device {
        return disk_facts(major, minor, via);
    }
    let upper = mount
        .super_options
        .split(',')
        .find_map(|o| o.strip_prefix("upperdir="));
    match upper {
        Some(upper) if mount.fs_type == "overlay" && depth == 0 => {
            block_device_at(Path::new(upper), 1).map(|mut b| {
                b.via = format!("overlay upper directory {upper}: {}", b.via);
                b
            })
        }
        _ => Err(format!(
            "{} is on {} ({}), which no block device backs",
            dir.display(),
            mount.fs_type,
            mount.source
        )),
    }
}

/// The whole disk of block device `major:minor` (a partition's parent).
fn disk_facts(major: u32, minor: u32, via: String) -> Result<BlockFacts, String> {
    let link = format!("/sys/dev/block/{major}:{minor}");
    let mut real = std::fs::canonicalize(&link).map_err(|e| format!("{link}: {e}"))?;
    if real.join("partition").exists() {
        real.pop();
    }
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| format!("{link} names no device"))?;
    let block = PathBuf::from("/sys/block").join(&name);
    let slaves = std::fs::read_dir(block.join("slaves"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    Ok(BlockFacts {
        rotational: read_trimmed(block.join("queue/rotational")).map(|r| r == "1"),
        model: read_trimmed(block.join("device/model")).filter(|m| !m.is_empty()),
        numa: numa_of_ancestors(&real),
        slaves,
        name,
        via,
    })
}

/// The first non-negative `numa_node` of a sysfs device or its parents
/// (a disk's controller, its PCI function, the bridges above).
fn numa_of_ancestors(dir: &Path) -> Option<u32> {
    dir.ancestors()
        .take_while(|p| p.starts_with("/sys/devices"))
        .find_map(|p| {
            read_trimmed(p.join("numa_node"))?
                .parse::<i64>()
                .ok()
                .filter(|&n| n >= 0)
        })
        .map(|n| n as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_and_links_parse() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n"), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist(""), Vec::<u32>::new());
        let h200 = PcieLink {
            gigatransfers: 32.0,
            width: 16,
            detail: String::new(),
        };
        assert_eq!(h200.name(), "PCIe 5.0 x16");
        // 32 GT/s x 128/130 / 8 bits x 16 lanes = 63.0 GB/s.
        assert!(
            (h200.bytes_per_s() - 63.015e9).abs() < 1e7,
            "{}",
            h200.bytes_per_s()
        );
        let gen3 = PcieLink {
            gigatransfers: 8.0,
            width: 8,
            ..h200
        };
        assert_eq!(gen3.name(), "PCIe 3.0 x8");
    }

    #[test]
    fn this_machine_has_a_node_with_cpus_and_memory() {
        let mut notes = Vec::new();
        let nodes = numa_nodes(&mut notes);
        assert!(!nodes.is_empty(), "{notes:?}");
        for n in &nodes {
            assert!(n.ram_bytes > 0 && !n.cpus.is_empty() && !n.core_cpus.is_empty());
            assert!(n.core_cpus.len() <= n.cpus.len());
        }
        assert!(!hostname().is_empty());
    }

    #[test]
    fn the_working_directory_has_a_disk_or_a_reason() {
        match block_device_of(Path::new(".")) {
            Ok(disk) => assert!(!disk.name.is_empty() && !disk.via.is_empty()),
            Err(why) => assert!(
                why.contains("block device") || why.contains("mount"),
                "{why}"
            ),
        }
    }
}
