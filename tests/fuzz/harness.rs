//! The campaign harness: the allocation and hang guards, the number of
//! inputs and the seed, the loop that runs each mutated input and judges
//! it, and the findings saved for replay.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// No input under a megabyte may ask for a gigabyte at once.
const MAX_ALLOCATION_BYTES: usize = 1 << 30;

/// An input that takes longer than this is a hang (release build).
const SLOW_SECONDS: f64 = 5.0;

thread_local! {
    /// The campaign and input this thread runs, for the allocation guard's message.
    static CURRENT: Cell<(&'static str, usize)> = const { Cell::new(("", 0)) };
}

/// The system allocator, refusing (and so aborting on) one allocation over
/// `MAX_ALLOCATION_BYTES`, after saying which input asked for it.
struct Guard;

impl Guard {
    fn check(size: usize) -> bool {
        if size <= MAX_ALLOCATION_BYTES {
            return true;
        }
        let (campaign, input) = CURRENT.with(Cell::get);
        // Formatting integers into stderr allocates nothing.
        let _ = writeln!(
            std::io::stderr(),
            "fuzz finding: campaign `{campaign}` input {input} asked for {size} bytes at once"
        );
        false
    }
}

unsafe impl GlobalAlloc for Guard {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !Guard::check(layout.size()) {
            return std::ptr::null_mut();
        }
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !Guard::check(layout.size()) {
            return std::ptr::null_mut();
        }
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !Guard::check(new_size) {
            return std::ptr::null_mut();
        }
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GUARD: Guard = Guard;

/// The hang guard: an input still running after `HANG_SECONDS` ends the
/// whole run, saying which campaign and input it is (a hang cannot be
/// caught and reported like a slow input).
mod watchdog {
    use std::collections::HashMap;
    use std::sync::{Mutex, Once};
    use std::time::{Duration, Instant};

    const HANG_SECONDS: u64 = 60;
    /// Each input running now, by id: its campaign, its number, its start.
    type Running = HashMap<u64, (&'static str, usize, Instant)>;
    static RUNNING: Mutex<Option<Running>> = Mutex::new(None);
    static START: Once = Once::new();

    /// Watches input `input` of `campaign` until the value is dropped.
    pub struct Watched(u64);

    pub fn watch(campaign: &'static str, input: usize) -> Watched {
        START.call_once(|| {
            std::thread::spawn(|| loop {
                std::thread::sleep(Duration::from_secs(1));
                let running = RUNNING.lock().unwrap();
                for (campaign, input, since) in running.iter().flat_map(|m| m.values()) {
                    if since.elapsed() > Duration::from_secs(HANG_SECONDS) {
                        eprintln!(
                            "fuzz finding: campaign `{campaign}` input {input} hangs (over {HANG_SECONDS} s)"
                        );
                        std::process::abort();
                    }
                }
            });
        });
        let id = next_id();
        let mut running = RUNNING.lock().unwrap();
        running
            .get_or_insert_with(HashMap::new)
            .insert(id, (campaign, input, Instant::now()));
        Watched(id)
    }

    fn next_id() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    impl Drop for Watched {
        fn drop(&mut self) {
            if let Some(m) = RUNNING.lock().unwrap().as_mut() {
                m.remove(&self.0);
            }
        }
    }
}

fn iterations() -> usize {
    std::env::var("FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// Inputs of campaign `name`: `iterations()`, but half for `model`, whose
/// inputs plan the repository's largest models on its largest box (ten
/// times the time of any other campaign's), so that CI's run stays near
/// 30 s on two cores.
fn iterations_of(name: &str) -> usize {
    match name {
        "model" => iterations().div_ceil(2),
        _ => iterations(),
    }
}

pub(super) fn seed() -> u64 {
    std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// What a campaign's run made of one input.
pub(super) enum Verdict {
    Accepted,
    /// Refused with this message (checked: one line, names the file).
    Refused(String),
    /// Accepted, but what it planned to is wrong.
    Invalid(String),
}

pub(super) type Mutator = fn(&mut fastrand::Rng, &[u8], &[Vec<u8>]) -> Vec<u8>;

/// Runs `iterations()` mutated inputs of `seeds` through `run`, each
/// written to `file_name` in a directory of its own, and fails listing
/// every finding.
pub(super) fn campaign(
    name: &'static str,
    file_name: &str,
    seeds: Vec<Vec<u8>>,
    mutate: Mutator,
    run: &dyn Fn(&Path) -> Verdict,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file_name);
    campaign_at(name, &path, &path, seeds, mutate, run);
}

/// `campaign` with each input written to `path`, a file among others that
/// `run` reads with it (a checkpoint's `config.json` or shard), whose
/// refusals must name `named` (the file, or the directory of all of them:
/// a config.json at odds with a shard is refused naming the shard).
pub(super) fn campaign_at(
    name: &'static str,
    path: &Path,
    named: &Path,
    seeds: Vec<Vec<u8>>,
    mutate: Mutator,
    run: &dyn Fn(&Path) -> Verdict,
) {
    let path = path.to_path_buf();
    let file_name = path.file_name().unwrap().to_string_lossy().into_owned();
    let file_name = file_name.as_str();
    let shown = named.display().to_string();
    // The seeds themselves are accepted: a campaign that refuses its seeds
    // tests nothing but the first check.
    for (i, s) in seeds.iter().enumerate() {
        std::fs::write(&path, s).unwrap();
        if let Verdict::Refused(m) | Verdict::Invalid(m) = run(&path) {
            panic!("{name}: seed {i} is not accepted: {m}");
        }
    }
    let mut rng = fastrand::Rng::with_seed(seed() ^ fnv(name));
    let mut findings: Vec<String> = Vec::new();
    let (mut accepted, mut slowest) = (0usize, 0f64);
    let started = Instant::now();
    let n = iterations_of(name);
    for i in 0..n {
        let base = &seeds[rng.usize(0..seeds.len())];
        let input = mutate(&mut rng, base, &seeds);
        std::fs::write(&path, &input).unwrap();
        CURRENT.with(|c| c.set((name, i)));
        let t = Instant::now();
        let watched = watchdog::watch(name, i);
        let verdict = catch_unwind(AssertUnwindSafe(|| run(&path)));
        drop(watched);
        let seconds = t.elapsed().as_secs_f64();
        slowest = slowest.max(seconds);
        let finding = match verdict {
            Err(panic) => Some(format!("panic: {}", panic_text(&panic))),
            Ok(_) if seconds > SLOW_SECONDS => Some(format!("took {seconds:.1} s")),
            Ok(Verdict::Accepted) => {
                accepted += 1;
                None
            }
            Ok(Verdict::Invalid(m)) => Some(format!("accepted but invalid: {m}")),
            Ok(Verdict::Refused(m)) if m.contains('\n') => {
                Some(format!("refusal of several lines: {m:?}"))
            }
            Ok(Verdict::Refused(m)) if !m.contains(&shown) => {
                Some(format!("refusal that does not name the file: {m}"))
            }
            Ok(Verdict::Refused(_)) => None,
        };
        if let Some(f) = finding {
            let kept = save_finding(name, i, file_name, &input);
            findings.push(format!("input {i} ({}): {f}", kept.display()));
        }
    }
    CURRENT.with(|c| c.set(("", 0)));
    println!(
        "{name}: {n} inputs, {accepted} accepted, {} findings, {:.1} s, slowest {slowest:.3} s",
        findings.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        findings.is_empty(),
        "{name}: {} findings (FUZZ_SEED={}):\n{}",
        findings.len(),
        seed(),
        findings
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Keeps a failing input under target/fuzz-findings for the regression test.
fn save_finding(campaign: &str, i: usize, file_name: &str, input: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("fuzz-findings")
        .join(campaign);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{i}-{file_name}"));
    std::fs::write(&path, input).unwrap();
    path
}

/// FNV-1a of a campaign's name: each campaign its own stream of inputs.
fn fnv(name: &str) -> u64 {
    name.bytes().fold(0xcbf29ce484222325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}
