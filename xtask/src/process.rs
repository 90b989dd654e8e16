//! The processes of the background servers xtask runs: the local LLM (`llm.rs`), Qdrant nodes (`qdrant.rs`), the
//! local search endpoint (`websearch.rs`) and `ragtune serve` under load (`bench_server.rs`).
//!
//! What every one of them needs, in one place:
//!
//! - starting a server with its output in a log file ([`spawn_logged`]), and the end of that log for error messages
//!   ([`log_tail`]);
//! - waiting until it is ready, polling with a deadline and giving up when the process exits ([`wait_ready`]);
//! - recognising a recorded pid as the server it was before signalling it, since pids are recycled
//!   ([`is_running_as`]);
//! - stopping it: SIGTERM, then SIGKILL after [`STOP_TIMEOUT`] ([`terminate`], [`terminate_child`],
//!   [`stop_recorded`]);
//! - a guard that stops it when dropped, so a failing step leaves no server behind ([`Guard`]);
//! - its record, `server.json`, written atomically and read back by `stop` and `status` ([`RecordFile`]).
//!
//! Qdrant nodes are the exception for starting and waiting: `ragtune_testkit::qdrant` does both (with `/readyz` and
//! the gRPC port), since the fault tests start nodes the same way.
//!
//! Signals go through `kill(1)` and liveness through `/proc`, since the workspace allows no unsafe code (and so no
//! libc calls).

use std::fs::File;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use crate::shell;

/// How long a server has to exit after SIGTERM before it gets SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a process has to disappear after SIGKILL before [`terminate`] gives up on it.
const KILL_TIMEOUT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------------------------------
// Starting

/// Starts `cmd` without stdin, its stdout and stderr written to `log` (created anew: an older log is truncated).
///
/// # Errors
///
/// When the log cannot be created (naming it) or the program cannot be started (naming the command).
pub fn spawn_logged(cmd: &mut Command, log: &Path) -> Result<Child> {
    let out = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let err = out.try_clone().with_context(|| format!("cannot reopen {}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    cmd.spawn().with_context(|| format!("cannot start `{}`", shell::display(cmd)))
}

/// The last `lines` lines of `text`, each indented with `  | `, for error messages.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].iter().map(|line| format!("  | {line}")).collect::<Vec<_>>().join("\n")
}

/// The last `lines` lines of the log at `path`, as [`tail`] shows them; nothing when it cannot be read.
pub fn log_tail(path: &Path, lines: usize) -> String {
    tail(&std::fs::read_to_string(path).unwrap_or_default(), lines)
}

/// Now, in Unix seconds (what records keep as `started_at`); 0 when the clock is before 1970.
pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

// ---------------------------------------------------------------------------------------------------------------
// Waiting until ready

/// How waiting for a server to become ready ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited<T> {
    /// The probe found the server ready.
    Ready,
    /// The process exited first, with this status.
    Exited(ExitStatus),
    /// The timeout passed; what the last probe saw.
    TimedOut(T),
}

/// Probes the server `child` every `interval` until `probe` finds it ready (`Ok`), the process exits, or `timeout`
/// (counted from this call) passes. A probe that is not ready says what it saw (`Err`); `waiting` is told of every
/// such probe but the last, with the time waited so far, for progress lines.
///
/// # Errors
///
/// When the process cannot be checked on.
pub fn wait_ready<T>(
    child: &mut Child,
    timeout: Duration,
    interval: Duration,
    mut probe: impl FnMut() -> Result<(), T>,
    mut waiting: impl FnMut(Duration, &T),
) -> Result<Waited<T>> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().context("cannot check on the server process")? {
            return Ok(Waited::Exited(status));
        }
        let last = match probe() {
            Ok(()) => return Ok(Waited::Ready),
            Err(last) => last,
        };
        let elapsed = started.elapsed();
        if elapsed >= timeout {
            return Ok(Waited::TimedOut(last));
        }
        waiting(elapsed, &last);
        std::thread::sleep(interval);
    }
}

/// Calls `done` every 100 ms until it returns true (then true) or `timeout` passes (then false).
fn wait_until(done: &mut dyn FnMut() -> bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Recorded pids

/// How a recorded pid is recognised, by its command line, as the server it was recorded for. Pids are recycled: a
/// server that died long ago may have left its pid to an unrelated process, which must never be signalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity<'a> {
    /// The program (`argv[0]`) ends with this: a binary started by its path (`/…/qdrant`).
    Program(&'a str),
    /// An argument contains this: a script run by an interpreter (`python …/llm_server.py`).
    Argument(&'a str),
}

impl Identity<'_> {
    /// Whether the command line `args` (`argv[0]` first) is the one this describes.
    fn matches(self, args: &[String]) -> bool {
        match self {
            Self::Program(name) => args.first().is_some_and(|program| program.ends_with(name)),
            Self::Argument(part) => args.iter().any(|arg| arg.contains(part)),
        }
    }
}

/// Whether `pid` is running and is the process `identity` describes, by `/proc/PID/cmdline`, so that a recycled pid
/// is never signalled. Without `/proc` there is no telling, and a running pid is trusted.
pub fn is_running_as(pid: u32, identity: Identity<'_>) -> bool {
    if !is_alive(pid) {
        return false;
    }
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmdline) => identity.matches(&cmdline_args(&cmdline)),
        Err(_) => !Path::new("/proc/self").exists(),
    }
}

/// The arguments in a `/proc/PID/cmdline` (each ended by a NUL), `argv[0]` first.
fn cmdline_args(cmdline: &[u8]) -> Vec<String> {
    let cmdline = cmdline.strip_suffix(&[0]).unwrap_or(cmdline);
    cmdline.split(|&b| b == 0).map(|arg| String::from_utf8_lossy(arg).into_owned()).collect()
}

/// Whether `pid` is a running process. A zombie (exited, not yet reaped by its parent) counts as gone.
pub fn is_alive(pid: u32) -> bool {
    let proc_dir = Path::new("/proc");
    if proc_dir.join("self").exists() {
        return std::fs::read_to_string(proc_dir.join(pid.to_string()).join("stat"))
            .is_ok_and(|stat| process_state(&stat).is_some_and(|state| state != 'Z' && state != 'X'));
    }
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The state letter of a `/proc/PID/stat` line (`R`, `S`, `Z`, …): the first field after the parenthesised name.
fn process_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

// ---------------------------------------------------------------------------------------------------------------
// Stopping

/// Stops `pid`: SIGTERM, then SIGKILL if `exited` has not turned true within [`STOP_TIMEOUT`]. `who` names the
/// server in the line that says so (`llm: pid 42 is still running 10s after SIGTERM; sending SIGKILL`).
///
/// # Errors
///
/// When `kill` fails on a process that is still there, or the process survives SIGKILL.
pub fn terminate(who: &str, pid: u32, exited: &mut dyn FnMut() -> bool) -> Result<()> {
    terminate_within(who, pid, STOP_TIMEOUT, exited)
}

/// [`terminate`] with the time SIGTERM is given.
fn terminate_within(who: &str, pid: u32, stop_timeout: Duration, exited: &mut dyn FnMut() -> bool) -> Result<()> {
    send_signal(pid, "TERM")?;
    if wait_until(exited, stop_timeout) {
        return Ok(());
    }
    println!("{who}: pid {pid} is still running {}s after SIGTERM; sending SIGKILL", stop_timeout.as_secs());
    send_signal(pid, "KILL")?;
    if wait_until(exited, KILL_TIMEOUT) {
        return Ok(());
    }
    bail!("pid {pid} survived SIGKILL")
}

/// Stops a server this process started, as [`terminate`] does, and reaps it.
///
/// # Errors
///
/// As [`terminate`].
pub fn terminate_child(who: &str, child: &mut Child) -> Result<()> {
    let pid = child.id();
    terminate(who, pid, &mut || child.try_wait().is_ok_and(|status| status.is_some()))
}

/// Stops the recorded server `pid`, as [`terminate`] does, if it still runs as `identity` (see [`is_running_as`]);
/// whether it did.
///
/// # Errors
///
/// As [`terminate`].
pub fn stop_recorded(who: &str, pid: u32, identity: Identity<'_>) -> Result<bool> {
    if !is_running_as(pid, identity) {
        return Ok(false);
    }
    terminate(who, pid, &mut || !is_alive(pid))?;
    Ok(true)
}

fn send_signal(pid: u32, signal: &str) -> Result<()> {
    let mut kill = Command::new("kill");
    kill.arg(format!("-{signal}")).arg(pid.to_string()).stdin(Stdio::null());
    let output = kill.output().with_context(|| format!("cannot run `{}`", shell::display(&kill)))?;
    // A process that exited meanwhile is what we wanted.
    if !output.status.success() && is_alive(pid) {
        bail!("`kill -{signal} {pid}` failed:\n{}", tail(&String::from_utf8_lossy(&output.stderr), 4));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// Guards

/// A server a [`Guard`] can stop.
pub trait Stop {
    /// Stops the server (or leaves it, if it was not ours to stop) and tidies up after it, saying what it did.
    ///
    /// # Errors
    ///
    /// When the server cannot be stopped.
    fn stop(self) -> Result<()>;
}

/// Keeps a server running while it is needed and stops it when dropped, so that a failing step does not leave it
/// behind; [`Guard::stop`] stops it and reports failure.
#[derive(Debug)]
pub struct Guard<S: Stop> {
    server: Option<S>,
    /// Names the server in the warning printed when stopping it on drop fails (`the local LLM server`).
    name: &'static str,
}

impl<S: Stop> Guard<S> {
    /// Guards `server`; `name` names it in warnings.
    pub fn new(server: S, name: &'static str) -> Self {
        Self { server: Some(server), name }
    }

    /// The server, until it is stopped.
    pub fn get(&self) -> Option<&S> {
        self.server.as_ref()
    }

    /// Stops the server now.
    ///
    /// # Errors
    ///
    /// As [`Stop::stop`].
    pub fn stop(mut self) -> Result<()> {
        self.server.take().map_or(Ok(()), S::stop)
    }
}

impl<S: Stop> Drop for Guard<S> {
    fn drop(&mut self) {
        if let Some(server) = self.server.take()
            && let Err(error) = server.stop()
        {
            eprintln!("warning: cannot stop {}: {error:#}", self.name);
        }
    }
}

/// A server process this process started and nothing else: stopping it is [`terminate_child`].
#[derive(Debug)]
pub struct Spawned {
    /// Names the server in messages (`bench server`).
    pub who: &'static str,
    pub child: Child,
}

impl Stop for Spawned {
    fn stop(mut self) -> Result<()> {
        terminate_child(self.who, &mut self.child)
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Records

/// What a server's record file holds: written as JSON once the server is ready, read back by `stop` and `status`.
pub trait Record: Sized {
    /// The record as JSON.
    fn to_json(&self) -> serde_json::Value;

    /// The record a JSON value holds.
    ///
    /// # Errors
    ///
    /// A missing or malformed field, named.
    fn from_json(value: &serde_json::Value) -> Result<Self>;
}

/// A record as its file holds it: pretty JSON and a newline.
pub fn render_record(record: &impl Record) -> String {
    format!("{:#}\n", record.to_json())
}

/// The record in `text`.
///
/// # Errors
///
/// When `text` is not JSON, or a field is missing or malformed (named).
pub fn parse_record<R: Record>(text: &str) -> Result<R> {
    let value: serde_json::Value = serde_json::from_str(text).context("not JSON")?;
    R::from_json(&value)
}

/// The string field `key` of a record.
///
/// # Errors
///
/// When there is none: "no string `key`".
pub fn string_field(value: &serde_json::Value, key: &str) -> Result<String> {
    value.get(key).and_then(|v| v.as_str()).map(str::to_owned).with_context(|| format!("no string `{key}`"))
}

/// The number field `key` of a record (a non-negative integer).
///
/// # Errors
///
/// When there is none: "no number `key`".
pub fn number_field(value: &serde_json::Value, key: &str) -> Result<u64> {
    value.get(key).and_then(serde_json::Value::as_u64).with_context(|| format!("no number `{key}`"))
}

/// The `pid` field of a record.
///
/// # Errors
///
/// When there is none, or it is too large for a pid.
pub fn pid_field(value: &serde_json::Value) -> Result<u32> {
    u32::try_from(number_field(value, "pid")?).context("`pid` is out of range")
}

/// A server's record file (`server.json`) holding an `R`.
#[derive(Debug, Clone)]
pub struct RecordFile<R> {
    path: PathBuf,
    record: PhantomData<fn() -> R>,
}

impl<R: Record> RecordFile<R> {
    /// The record file at `path`.
    pub fn new(path: PathBuf) -> Self {
        Self { path, record: PhantomData }
    }

    /// Where the record is kept.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The record, or `None` when there is none.
    ///
    /// # Errors
    ///
    /// When the file cannot be read or holds no record, naming it.
    pub fn read(&self) -> Result<Option<R>> {
        let path = &self.path;
        match std::fs::read_to_string(path) {
            Ok(text) => parse_record(&text)
                .map(Some)
                .with_context(|| format!("{} is not a server record: delete it", path.display())),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// Writes `record`, atomically: a reader sees the old record or the new one, never half of one.
    ///
    /// # Errors
    ///
    /// When the file cannot be written, naming it.
    pub fn write(&self, record: &R) -> Result<()> {
        let tmp = self.path.with_extension("partial");
        std::fs::write(&tmp, render_record(record))
            .and_then(|()| std::fs::rename(&tmp, &self.path))
            .with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Removes the file if it still holds a record `ours` accepts: another `start` may have replaced it meanwhile.
    pub fn remove_if(&self, ours: impl FnOnce(&R) -> bool) {
        if self.read().ok().flatten().is_some_and(|record| ours(&record)) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `sleep 30` this test owns; stopped by the test or, failing that, killed when dropped.
    struct Sleeper(Child);

    impl Sleeper {
        /// Returns once `/proc` shows `sleep`: right after `exec` the command line can read as empty for a moment.
        fn start() -> Self {
            let sleeper = Self(Command::new("sleep").arg("30").stdin(Stdio::null()).spawn().unwrap());
            let pid = sleeper.0.id();
            assert!(wait_until(&mut || is_running_as(pid, Identity::Program("sleep")), Duration::from_secs(10)));
            sleeper
        }
    }

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn process_states_parse() {
        assert_eq!(process_state("4242 (python) S 1 4242 4242 0 -1"), Some('S'));
        assert_eq!(process_state("4242 (a) b) (c) Z 1 4242"), Some('Z'));
        assert_eq!(process_state("garbage"), None);
    }

    #[test]
    fn command_lines_split_at_nuls() {
        assert_eq!(
            cmdline_args(b"/usr/bin/python3\0/r/xtask/llm_server.py\0--port\0"),
            ["/usr/bin/python3", "/r/xtask/llm_server.py", "--port"]
        );
        let args = cmdline_args(b"/shared/qdrant/qdrant\0");
        assert!(Identity::Program("qdrant").matches(&args));
        assert!(!Identity::Program("ragtune").matches(&args));
        let python = cmdline_args(b"python\0/r/xtask/llm_server.py\0");
        assert!(Identity::Argument("llm_server.py").matches(&python));
        assert!(!Identity::Program("llm_server.py").matches(&python));
    }

    #[test]
    fn a_pid_running_another_program_is_not_the_server() {
        let mut sleeper = Sleeper::start();
        let pid = sleeper.0.id();
        assert!(is_alive(pid));
        assert!(is_running_as(pid, Identity::Program("sleep")));
        assert!(is_running_as(pid, Identity::Argument("30")));
        // What a recycled pid looks like: alive, but not the recorded server.
        assert!(!is_running_as(pid, Identity::Program("qdrant")));
        assert!(!is_running_as(pid, Identity::Argument("llm_server.py")));
        assert!(!is_running_as(std::process::id(), Identity::Program("qdrant")));
        // A stop of the recorded server then signals nothing.
        assert!(!stop_recorded("test", pid, Identity::Argument("llm_server.py")).unwrap());
        assert!(is_alive(pid));
        terminate_child("test", &mut sleeper.0).unwrap();
        assert!(!is_alive(pid));
        assert!(!is_running_as(pid, Identity::Program("sleep")));
        // Larger than any pid_max.
        assert!(!is_alive(u32::MAX));
    }

    #[test]
    fn terminate_stops_and_reaps_a_child() {
        let mut sleeper = Sleeper::start();
        let started = Instant::now();
        terminate_child("test", &mut sleeper.0).unwrap();
        assert!(started.elapsed() < STOP_TIMEOUT, "sleep obeys SIGTERM: no SIGKILL was needed");
        assert!(sleeper.0.try_wait().unwrap().is_some(), "reaped");
    }

    #[test]
    fn a_recorded_server_is_stopped_by_pid() {
        let mut sleeper = Sleeper::start();
        let pid = sleeper.0.id();
        // The child stays a zombie until reaped, and a zombie counts as gone.
        assert!(stop_recorded("test", pid, Identity::Program("sleep")).unwrap());
        assert!(!is_alive(pid));
        assert!(sleeper.0.try_wait().unwrap().is_some());
    }

    #[test]
    fn sigkill_follows_an_ignored_sigterm() {
        let mut stubborn = Sleeper(
            Command::new("sh").args(["-c", "trap '' TERM; exec sleep 30"]).stdin(Stdio::null()).spawn().unwrap(),
        );
        let pid = stubborn.0.id();
        // Once `sleep` runs, the trap (inherited across exec) is in place.
        assert!(wait_until(&mut || is_running_as(pid, Identity::Program("sleep")), Duration::from_secs(10)));
        let started = Instant::now();
        terminate_within("test", pid, Duration::from_millis(300), &mut || {
            stubborn.0.try_wait().is_ok_and(|status| status.is_some())
        })
        .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(300), "SIGTERM was ignored, so SIGKILL ended it");
        assert!(!is_alive(pid));
    }

    #[test]
    fn waiting_ends_ready_on_exit_or_at_the_deadline() {
        let mut sleeper = Sleeper::start();
        let mut probes = 0;
        let mut heard = Vec::new();
        let waited = wait_ready(
            &mut sleeper.0,
            Duration::from_secs(10),
            Duration::from_millis(10),
            || {
                probes += 1;
                if probes == 3 { Ok(()) } else { Err(probes) }
            },
            |_, last| heard.push(*last),
        )
        .unwrap();
        assert_eq!(waited, Waited::Ready);
        assert_eq!(heard, [1, 2]);

        let mut heard = 0;
        let waited = wait_ready(
            &mut sleeper.0,
            Duration::from_millis(100),
            Duration::from_millis(10),
            || Err("loading"),
            |_, _| heard += 1,
        )
        .unwrap();
        assert_eq!(waited, Waited::TimedOut("loading"));
        assert!(heard > 0);
        terminate_child("test", &mut sleeper.0).unwrap();

        let mut exits = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let waited =
            wait_ready(&mut exits, Duration::from_secs(10), Duration::from_millis(10), || Err(()), |_, _| {}).unwrap();
        assert!(matches!(waited, Waited::Exited(status) if status.code() == Some(3)), "{waited:?}");
    }

    #[test]
    fn logs_take_the_output_and_tails_keep_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "  | b\n  | c");
        assert_eq!(tail("", 3), "");
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        std::fs::write(&log, "an older run\n").unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo one; echo two >&2; echo three"]);
        let status = spawn_logged(&mut cmd, &log).unwrap().wait().unwrap();
        assert!(status.success());
        assert_eq!(log_tail(&log, 2), "  | two\n  | three");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\ntwo\nthree\n");
        assert_eq!(log_tail(&dir.path().join("none.log"), 2), "");

        let error = spawn_logged(&mut Command::new("/nonexistent/server"), &log).unwrap_err();
        assert_eq!(error.to_string(), "cannot start `server`");
        let error = spawn_logged(&mut Command::new("true"), &dir.path().join("no/such/dir/x.log")).unwrap_err();
        assert!(error.to_string().starts_with("cannot create ") && error.to_string().ends_with("x.log"), "{error}");
    }

    /// A record like the servers' own: a pid, a URL and a path.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Sample {
        url: String,
        pid: u32,
        dir: PathBuf,
        started_at: u64,
    }

    impl Record for Sample {
        fn to_json(&self) -> serde_json::Value {
            serde_json::json!({
                "url": self.url,
                "pid": self.pid,
                "dir": self.dir.display().to_string(),
                "started_at": self.started_at,
            })
        }

        fn from_json(value: &serde_json::Value) -> Result<Self> {
            Ok(Self {
                url: string_field(value, "url")?,
                pid: pid_field(value)?,
                dir: PathBuf::from(string_field(value, "dir")?),
                started_at: number_field(value, "started_at")?,
            })
        }
    }

    #[test]
    fn records_round_trip_through_their_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = RecordFile::<Sample>::new(dir.path().join("server.json"));
        assert!(file.read().unwrap().is_none(), "no file, no record");
        let sample =
            Sample { url: "http://127.0.0.1:41234".into(), pid: 4242, dir: "/tmp/n0".into(), started_at: unix_now() };
        file.write(&sample).unwrap();
        assert_eq!(file.read().unwrap(), Some(sample.clone()));
        let text = std::fs::read_to_string(file.path()).unwrap();
        assert!(text.ends_with("}\n") && text.contains("\n  \"pid\": 4242,\n"), "{text}");
        assert!(!dir.path().join("server.partial").exists(), "the temporary file is renamed into place");

        // Another server's record stays.
        file.remove_if(|r| r.pid == 1);
        assert!(file.path().exists());
        file.remove_if(|r| r.pid == 4242);
        assert!(!file.path().exists());
        file.remove_if(|_| true);

        std::fs::write(file.path(), "not json").unwrap();
        let error = format!("{:#}", file.read().unwrap_err());
        assert!(error.contains("server.json is not a server record: delete it: not JSON"), "{error}");
        std::fs::write(file.path(), r#"{"url": "u", "pid": -3, "dir": "d", "started_at": 1}"#).unwrap();
        assert!(format!("{:#}", file.read().unwrap_err()).ends_with("delete it: no number `pid`"));
        // An unreadable record is left for the user to look at.
        file.remove_if(|_| true);
        assert!(file.path().exists());
        let error = parse_record::<Sample>(r#"{"url": "u", "pid": 4294967296, "dir": "d", "started_at": 1}"#);
        assert_eq!(
            format!("{:#}", error.unwrap_err()),
            "`pid` is out of range: out of range integral type conversion attempted"
        );
        let error = parse_record::<Sample>(r#"{"url": 1, "pid": 1}"#);
        assert_eq!(format!("{:#}", error.unwrap_err()), "no string `url`");
    }

    /// Records what was stopped, for the guard's test.
    #[derive(Debug)]
    struct Flag<'a>(&'a std::cell::Cell<u32>, bool);

    impl Stop for Flag<'_> {
        fn stop(self) -> Result<()> {
            self.0.set(self.0.get() + 1);
            if self.1 { bail!("cannot") } else { Ok(()) }
        }
    }

    #[test]
    fn guards_stop_once_when_stopped_or_dropped() {
        let stops = std::cell::Cell::new(0);
        let guard = Guard::new(Flag(&stops, false), "the flag");
        assert!(guard.get().is_some());
        guard.stop().unwrap();
        assert_eq!(stops.get(), 1, "stopped once, not again on drop");
        drop(Guard::new(Flag(&stops, false), "the flag"));
        assert_eq!(stops.get(), 2);
        // A failure on drop is a warning, not a panic.
        drop(Guard::new(Flag(&stops, true), "the flag"));
        assert_eq!(stops.get(), 3);
        assert!(Guard::new(Flag(&stops, true), "the flag").stop().is_err());

        let child = Command::new("sleep").arg("30").stdin(Stdio::null()).spawn().unwrap();
        let pid = child.id();
        drop(Guard::new(Spawned { who: "test", child }, "the sleeper"));
        assert!(!is_alive(pid), "the guard stopped its process when dropped");
    }
}
