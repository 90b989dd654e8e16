//! `ragtune serve` on a store whose disk fills up (issue 42), on a real, small tmpfs: writes are refused with a
//! clear error, nothing acknowledged is lost, a refused batch leaves nothing behind, `/readyz` says not ready while
//! the store cannot write, and writes succeed again once space is freed — both when the store sees the full disk
//! coming (its free-space margin) and when redb's own write fails (no margin), after which the store reopens.
//!
//! Mounting a tmpfs needs root; elsewhere the test says so and skips.

use std::path::{Path, PathBuf};
use std::process::Command;

use ragtune::ServerSettings;
use ragtune_server::Server;
use ragtune_testkit::http::{Response, request};
use serde_json::{Value, json};

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(megabytes: u32) -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m"), "tmpfs"])
            .arg(dir.path())
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            eprintln!("SKIPPED: mounting a tmpfs needs root (mount -t tmpfs); the disk-full test did not run");
            return None;
        }
        Some(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Free bytes as an unprivileged writer sees them.
    fn free(&self) -> u64 {
        let out = Command::new("df").args(["--output=avail", "-B1"]).arg(self.path()).output().unwrap();
        String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse().unwrap()
    }

    /// Grows or shrinks a filler file so that about `leave` bytes stay free.
    fn leave_free(&self, leave: u64) {
        let filler = self.path().join("filler");
        let current = std::fs::metadata(&filler).map_or(0, |m| m.len());
        let target = (current + self.free()).saturating_sub(leave);
        // Written, not `set_len`: a sparse file takes no space on tmpfs.
        let _ = std::fs::remove_file(&filler);
        let chunk = vec![0u8; 1 << 20];
        let mut f = std::fs::File::create(&filler).unwrap();
        let mut written = 0u64;
        while written < target {
            let n = (target - written).min(chunk.len() as u64) as usize;
            if std::io::Write::write_all(&mut f, &chunk[..n]).is_err() {
                break;
            }
            written += n as u64;
        }
        let _ = f.sync_all();
    }

    fn free_all(&self) {
        let _ = std::fs::remove_file(self.path().join("filler"));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

struct Running {
    url: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn serve(store: PathBuf, min_free_bytes: u64) -> Running {
    let mut cfg = ragtune::Config::default();
    cfg.store.path = store;
    cfg.store.min_free_bytes = min_free_bytes;
    cfg.embedding.mode = ragtune::EmbeddingMode::Off;
    cfg.llm.url = String::new();
    cfg.llm.cache = false;
    let engine = ragtune::Engine::open(cfg).await.unwrap();
    let settings = ServerSettings { bind: "127.0.0.1:0".into(), ..ServerSettings::default() };
    let server = Server::bind(engine, settings).await.unwrap();
    let url = format!("http://{}", server.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    Running { url, _stop: stop }
}

async fn call(url: &str, method: &str, path: &str, body: Option<Value>) -> Response {
    let (url, method, path) = (url.to_owned(), method.to_owned(), path.to_owned());
    tokio::task::spawn_blocking(move || {
        request(&method, &url, &path, &[], body.map(|b| b.to_string()).as_deref()).expect("an answer")
    })
    .await
    .unwrap()
}

/// Batch `b`: 40 documents of about 5 KB each, every one findable by its own word.
fn batch(b: usize) -> Value {
    let docs: Vec<Value> = (0..40)
        .map(|i| {
            let text = format!("marker{b}x{i} {}", "filler words for the disk test ".repeat(160));
            json!({"id": format!("b{b}-d{i}"), "text": text})
        })
        .collect();
    json!({ "documents": docs })
}

/// Every document of batch `b` that a search finds.
async fn present(url: &str, b: usize) -> usize {
    let mut n = 0;
    for i in 0..40 {
        let q = json!({"query": format!("marker{b}x{i}"), "top_k": 1, "strategy": "bm25"});
        let r = call(url, "POST", "/v1/search", Some(q)).await;
        assert_eq!(r.status, 200, "reads keep working: {}", r.body);
        if r.json()["hits"][0]["chunk"]["doc_id"] == format!("b{b}-d{i}") {
            n += 1;
        }
    }
    n
}

/// Writes batches until one is refused; checks what was acknowledged is whole and what was refused is absent.
async fn fill_until_refused(url: &str) -> (Vec<usize>, usize, String) {
    let mut acked = Vec::new();
    for b in 0..200 {
        let r = call(url, "PUT", "/v1/documents", Some(batch(b))).await;
        if r.status == 200 {
            acked.push(b);
            continue;
        }
        return (acked, b, format!("{} {}", r.status, r.body));
    }
    panic!("the disk never filled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_clearly_and_they_succeed_again_once_space_is_freed() {
    let Some(fs) = Tmpfs::mount(48) else { return };
    let s = serve(fs.path().join("store"), 8 << 20).await;
    let u = s.url.as_str();
    assert_eq!(call(u, "PUT", "/v1/documents", Some(batch(1000))).await.status, 200);
    fs.leave_free(10 << 20);

    // The store's margin: writes are refused before redb runs out of space.
    let (acked, refused, error) = fill_until_refused(u).await;
    assert!(error.starts_with("503") && error.contains("free space"), "{error}");
    for b in &acked {
        assert_eq!(present(u, *b).await, 40, "acknowledged batch {b} is whole");
    }
    assert_eq!(present(u, refused).await, 0, "the refused batch left nothing: {error}");

    // Below the margin the store is not ready; freed space makes it ready and writable again.
    fs.leave_free(4 << 20);
    let r = call(u, "GET", "/readyz", None).await;
    assert_eq!((r.status, r.json()), (503, json!({"ready": false})), "{}", r.body);
    fs.free_all();
    // The probe's answer is kept a second.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(call(u, "GET", "/readyz", None).await.status, 200);
    assert_eq!(call(u, "PUT", "/v1/documents", Some(batch(refused))).await.status, 200);
    assert_eq!(present(u, refused).await, 40);
    assert_eq!(present(u, 1000).await, 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_fails_on_a_full_disk_loses_nothing_and_the_store_reopens() {
    let Some(fs) = Tmpfs::mount(48) else { return };
    // No margin: redb itself runs into the full disk.
    let s = serve(fs.path().join("store"), 0).await;
    let u = s.url.as_str();
    assert_eq!(call(u, "PUT", "/v1/documents", Some(batch(1000))).await.status, 200);
    fs.leave_free(2 << 20);

    let (acked, refused, error) = fill_until_refused(u).await;
    assert!(error.starts_with("503") && error.contains("disk is full"), "{error}");
    // Reads go on while the disk is still full.
    assert_eq!(present(u, 1000).await, 40, "reads on a full disk");
    let r = call(u, "GET", "/readyz", None).await;
    assert_eq!(r.status, 503, "not ready while it cannot write: {}", r.body);
    // Nothing acknowledged is lost.
    fs.free_all();
    for b in acked.iter().chain([&1000]) {
        assert_eq!(present(u, *b).await, 40, "acknowledged batch {b} is whole");
    }
    assert_eq!(present(u, refused).await, 0, "the failed batch left nothing: {error}");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(call(u, "GET", "/readyz", None).await.status, 200);
    let r = call(u, "PUT", "/v1/documents", Some(batch(refused))).await;
    assert_eq!(r.status, 200, "writes succeed again: {}", r.body);
    assert_eq!(present(u, refused).await, 40);
}
