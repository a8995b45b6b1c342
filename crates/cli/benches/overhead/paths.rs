//! The paths measured: `rebound serve` and `rebound chaos` as child processes, the TCP relay
//! floor, nginx as the reference proxy, and `wrk` for saturation.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::BODY;

pub(crate) struct Proc(pub(crate) Child);

impl Drop for Proc {
    /// Asks the process to stop (nginx's master then stops its workers, which a kill would
    /// leave running), and kills it if it has not within two seconds.
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_raw(self.0.id() as i32);
        if let Some(pid) = pid {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a program and reads its listening address: the last word of its first line.
pub(crate) fn start(command: &mut Command) -> (Proc, SocketAddr) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the program starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    (Proc(child), addr)
}

/// Starts a rebound command.
pub(crate) fn rebound(args: &[&str]) -> (Proc, SocketAddr) {
    let data = std::env::temp_dir().join(format!("rebound-bench-data-{}", std::process::id()));
    start(
        Command::new(env!("CARGO_BIN_EXE_rebound"))
            .args(args)
            .env("XDG_DATA_HOME", data),
    )
}

/// `rebound serve` in front of `chaos`, with `extra` flags.
pub(crate) fn serve(chaos: SocketAddr, extra: &[&str]) -> (Proc, SocketAddr) {
    let openai = format!("http://{chaos}/v1");
    let anthropic = format!("http://{chaos}");
    let mut args = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--openai-upstream",
        &openai,
        "--anthropic-upstream",
        &anthropic,
    ];
    args.extend_from_slice(extra);
    rebound(&args)
}

/// The environment variable that makes this program the byte relay instead of the benchmark.
pub(crate) const RELAY_ENV: &str = "REBOUND_BENCH_RELAY_TO";

/// The floor of one extra hop: a process that copies bytes both ways between each client
/// connection and its own upstream connection, with no HTTP work at all. Any HTTP proxy on
/// this machine pays at least what this pays.
pub(crate) fn relay(upstream: SocketAddr) -> (Proc, SocketAddr) {
    start(Command::new(std::env::current_exe().unwrap()).env(RELAY_ENV, upstream.to_string()))
}

/// Runs the relay (in the child process) until killed. One thread, as `rebound serve` runs.
pub(crate) fn run_relay(upstream: SocketAddr) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap());
        loop {
            let Ok((mut client, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn nginx(upstream: SocketAddr) -> Option<(Proc, SocketAddr)> {
    let binary = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
    let dir = std::env::temp_dir().join(format!("rebound-bench-nginx-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("logs")).ok()?;
    let port = free_port();
    let conf = format!(
        "worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/logs/error.log;\nevents {{ worker_connections 8192; }}\nhttp {{\n access_log off;\n upstream up {{ server {upstream}; keepalive 64; }}\n server {{\n  listen 127.0.0.1:{port};\n  location / {{ proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; }}\n }}\n}}\n",
        d = dir.display()
    );
    std::fs::write(dir.join("nginx.conf"), conf).ok()?;
    let child = Command::new(binary)
        .args([
            "-c",
            &dir.join("nginx.conf").display().to_string(),
            "-p",
            &dir.display().to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    for _ in 0..100 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Some((Proc(child), addr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// `wrk -t1 -c16 -d4s` on a non-streaming POST: requests per second.
pub(crate) fn wrk(addr: SocketAddr) -> Option<f64> {
    let script = std::env::temp_dir().join(format!("rebound-bench-{}.lua", std::process::id()));
    std::fs::write(
        &script,
        format!("wrk.method = \"POST\"\nwrk.body = '{BODY}'\nwrk.headers[\"Content-Type\"] = \"application/json\"\n"),
    )
    .ok()?;
    let out = Command::new("wrk")
        .args([
            "-t1",
            "-c16",
            "-d4s",
            "-s",
            &script.display().to_string(),
            &format!("http://{addr}/v1/chat/completions"),
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
}
