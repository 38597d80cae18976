//! The deployment examples of docs/serving.md ("Beyond one machine") checked against the code: the
//! Kubernetes manifest (deploy/kubernetes/opu-serve.yaml) and the nginx config (deploy/nginx/opu-serve.conf).
//!
//! - Kubernetes: a Deployment, a Service and a HorizontalPodAutoscaler; the probes, the Service, the scrape
//!   annotations and the container's `--port` agree on one port; the readiness probe is `/health`; the
//!   container's command line parses with the real `opu serve` (run with the model swapped for a missing
//!   file: the error must be about that file, not a usage error); the HPA's metric is one the server
//!   exports.
//! - nginx: an upstream of two or more servers with passive health checks, least_conn, `/v1/` proxied to it
//!   unbuffered (server-sent events), a read timeout past opu serve's default request timeout, a 503 retried
//!   on another instance; and `nginx -t` passes where nginx is installed.
//! - docs/serving.md names every metric of host/src/serve/metrics.rs and every flag of `opu serve`.
//!
//! No model is needed: everything here is text, plus one run of the binary that stops at the model file.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use yaml_rust2::{Yaml, YamlLoader};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// A scalar as text (`8080` and `"8080"` alike); None for a missing key or a collection.
fn text(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn list(y: &Yaml) -> &[Yaml] {
    y.as_vec().map_or(&[], Vec::as_slice)
}

/// The value of `--name` in `args` (`--name value` or `--name=value`).
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let eq = format!("{name}=");
    args.iter().enumerate().find_map(|(i, a)| {
        if a == name {
            args.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix(&eq)
        }
    })
}

/// Whether a probe's or Service's `port` (a number, or the name of a container port) is `port`.
fn names_port(y: &Yaml, port: u16, port_name: Option<&str>) -> bool {
    match y {
        Yaml::Integer(i) => *i == i64::from(port),
        Yaml::String(s) => s.parse::<u16>().map_or(Some(s.as_str()) == port_name, |p| p == port),
        _ => false,
    }
}

/// Runs `cmd` to its end, at most `limit` (then kills it and fails).
fn run_with_limit(mut cmd: Command, limit: Duration) -> std::process::Output {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("starting the command");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("waiting for the command").is_some() {
            return child.wait_with_output().expect("the command's output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("the command's output");
            panic!("{cmd:?} still ran after {limit:?}: stderr {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_kubernetes_manifest_agrees_with_opu_serve() {
    let text_ = read("deploy/kubernetes/opu-serve.yaml");
    let docs = YamlLoader::load_from_str(&text_).expect("deploy/kubernetes/opu-serve.yaml is YAML");
    let of_kind = |kind: &str| -> Vec<&Yaml> { docs.iter().filter(|d| d["kind"].as_str() == Some(kind)).collect() };
    for kind in ["Deployment", "Service", "HorizontalPodAutoscaler"] {
        assert_eq!(of_kind(kind).len(), 1, "one {kind} in the manifest; kinds: {:?}", docs.iter().map(|d| d["kind"].as_str()).collect::<Vec<_>>());
    }
    let deployment = of_kind("Deployment")[0];
    assert_eq!(deployment["apiVersion"].as_str(), Some("apps/v1"));
    let name = deployment["metadata"]["name"].as_str().expect("the Deployment's name");
    let template = &deployment["spec"]["template"];
    let labels = template["metadata"]["labels"].as_hash().expect("the pod template's labels");
    // the Deployment's selector picks its own pods
    let selector = deployment["spec"]["selector"]["matchLabels"].as_hash().expect("the Deployment's selector");
    for (k, v) in selector {
        assert_eq!(labels.get(k), Some(v), "the selector's {k:?} is not a label of the pod template");
    }

    // The container and its command line.
    let containers = list(&template["spec"]["containers"]);
    assert_eq!(containers.len(), 1, "one container");
    let c = &containers[0];
    let argv: Vec<String> = list(&c["command"]).iter().chain(list(&c["args"])).map(|y| text(y).expect("command and args are scalars")).collect();
    assert!(argv.len() > 2, "the container's command line: {argv:?}");
    assert_eq!(Path::new(&argv[0]).file_name().and_then(|n| n.to_str()), Some("opu"), "the container runs the `opu` binary: {argv:?}");
    assert_eq!(argv[1], "serve", "{argv:?}");
    let args = &argv[1..];
    assert_eq!(flag(args, "--host"), Some("0.0.0.0"), "the server must listen on every interface of the pod: {args:?}");
    let port: u16 = flag(args, "--port").expect("--port in the container's args").parse().expect("--port is a port number");
    let model = flag(args, "--model").expect("--model in the container's args");
    // (the backend and the overlay are read after the model file, so the run below does not reach them)
    let backend = flag(args, "--backend").unwrap_or("auto");
    assert!(opu_host::backend::BACKENDS.contains(&backend), "--backend {backend}: not one of {:?}", opu_host::backend::BACKENDS);
    if let Some(config) = flag(args, "--config") {
        opu_hw::OverlayConfig::from_name_or_path(config).unwrap_or_else(|e| panic!("--config {config}: {e}"));
    }

    // The container port, the probes, the scrape annotations and the Service all name that port.
    let container_port = list(&c["ports"]).iter().find(|p| p["containerPort"].as_i64() == Some(i64::from(port)));
    let container_port = container_port.unwrap_or_else(|| panic!("no containerPort {port} (the --port) in {:?}", c["ports"]));
    let port_name = container_port["name"].as_str();
    let ready = &c["readinessProbe"]["httpGet"];
    assert_eq!(ready["path"].as_str(), Some("/health"), "the readiness probe: GET /health (503 while the model loads)");
    assert!(names_port(&ready["port"], port, port_name), "the readiness probe's port {:?} is not {port}", ready["port"]);
    let live = &c["livenessProbe"];
    let live_port = if live["httpGet"].is_badvalue() { &live["tcpSocket"]["port"] } else { &live["httpGet"]["port"] };
    assert!(names_port(live_port, port, port_name), "the liveness probe's port {live_port:?} is not {port}");
    if let Some(path) = live["httpGet"]["path"].as_str() {
        // /health is 503 while the model loads: a liveness probe on it would restart a loading server
        assert_ne!(path, "/health", "the liveness probe must not be /health");
    }
    let notes = &template["metadata"]["annotations"];
    assert_eq!(text(&notes["prometheus.io/scrape"]).as_deref(), Some("true"));
    assert_eq!(text(&notes["prometheus.io/path"]).as_deref(), Some("/metrics"));
    assert_eq!(text(&notes["prometheus.io/port"]), Some(port.to_string()), "the scrape port");

    let service = of_kind("Service")[0];
    let sel = service["spec"]["selector"].as_hash().expect("the Service's selector");
    for (k, v) in sel {
        assert_eq!(labels.get(k), Some(v), "the Service's selector {k:?} does not pick the Deployment's pods");
    }
    assert!(
        list(&service["spec"]["ports"]).iter().any(|p| names_port(&p["targetPort"], port, port_name)),
        "the Service targets port {port}: {:?}",
        service["spec"]["ports"]
    );

    // SIGTERM finishes the running requests, which take at most --request-timeout: the grace period covers it.
    let timeout: f64 = flag(args, "--request-timeout").map_or(600.0, |t| t.parse().expect("--request-timeout is a number"));
    let grace = template["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap_or(30) as f64;
    assert!(grace >= timeout, "terminationGracePeriodSeconds {grace} is shorter than --request-timeout {timeout}: SIGKILL would cut running requests");

    // The autoscaler scales this Deployment on a metric the server exports.
    let hpa = of_kind("HorizontalPodAutoscaler")[0];
    assert_eq!(hpa["apiVersion"].as_str(), Some("autoscaling/v2"));
    let target = &hpa["spec"]["scaleTargetRef"];
    assert_eq!((target["kind"].as_str(), target["name"].as_str()), (Some("Deployment"), Some(name)));
    let metrics_rs = read("host/src/serve/metrics.rs");
    let metrics: Vec<&Yaml> = list(&hpa["spec"]["metrics"]).iter().collect();
    assert!(!metrics.is_empty(), "the HPA's metrics");
    for m in metrics {
        let kind = m["type"].as_str().expect("a metric's type");
        if !matches!(kind, "Pods" | "Object" | "External") {
            continue; // cpu or memory
        }
        let key = kind.to_lowercase();
        let metric = m[key.as_str()]["metric"]["name"].as_str().unwrap_or_else(|| panic!("the {kind} metric's name: {m:?}"));
        assert!(metrics_rs.contains(&format!("\"{metric}\"")), "the HPA scales on `{metric}`, which host/src/serve/metrics.rs does not export");
    }

    // The command line parses with the real `opu serve`: with the model swapped for a missing file, it must
    // get past clap and its own checks of the flags, and stop at that file (before binding the port).
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("deploy-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("no-such-model.gguf");
    let mut swapped: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--model" {
            assert!(it.next().is_some_and(|m| m == model));
            swapped.extend(["--model".to_string(), missing.display().to_string()]);
        } else if a.starts_with("--model=") {
            swapped.push(format!("--model={}", missing.display()));
        } else {
            swapped.push(a.clone());
        }
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_opu"));
    cmd.args(&swapped).env("OPU_CACHE", dir.join("cache"));
    let out = run_with_limit(cmd, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for usage in ["unexpected argument", "invalid value", "Usage:", "must be"] {
        assert!(!stderr.contains(usage), "`opu {}` is refused by the command line: {stderr}", swapped.join(" "));
    }
    assert_eq!(out.status.code(), Some(1), "`opu {}`: {stderr}", swapped.join(" "));
    assert!(stderr.contains(&missing.display().to_string()) && stderr.contains("No such file"), "the error is not about the missing model file: {stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One directive of an nginx config: its name, arguments and block.
#[derive(Debug)]
struct Directive {
    name: String,
    args: Vec<String>,
    block: Option<Vec<Directive>>,
}

impl Directive {
    fn all<'a>(items: &'a [Directive], name: &'a str) -> impl Iterator<Item = &'a Directive> + 'a {
        items.iter().filter(move |d| d.name == name)
    }
    fn one<'a>(items: &'a [Directive], name: &str) -> Option<&'a Directive> {
        items.iter().find(|d| d.name == name)
    }
    fn children(&self) -> &[Directive] {
        self.block.as_deref().unwrap_or(&[])
    }
}

/// Parses nginx's config syntax (directives ended by `;`, blocks in braces, `#` comments, quoted strings):
/// enough to read a config's structure.
fn parse_nginx(src: &str) -> Vec<Directive> {
    let mut tokens: Vec<String> = Vec::new();
    let mut chars = src.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '#' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '{' | '}' | ';' => tokens.push(c.to_string()),
            '"' | '\'' => {
                let mut s = String::new();
                for d in chars.by_ref() {
                    if d == c {
                        break;
                    }
                    s.push(d);
                }
                tokens.push(s);
            }
            c if c.is_whitespace() => {}
            c => {
                let mut s = c.to_string();
                while let Some(&d) = chars.peek() {
                    if d.is_whitespace() || "{};#".contains(d) {
                        break;
                    }
                    s.push(d);
                    chars.next();
                }
                tokens.push(s);
            }
        }
    }
    fn block(tokens: &mut std::iter::Peekable<std::vec::IntoIter<String>>, nested: bool) -> Vec<Directive> {
        let mut out = Vec::new();
        while let Some(name) = tokens.next() {
            if name == "}" {
                assert!(nested, "an unmatched `}}`");
                return out;
            }
            let mut args = Vec::new();
            loop {
                match tokens.next().as_deref() {
                    Some(";") => {
                        out.push(Directive { name, args, block: None });
                        break;
                    }
                    Some("{") => {
                        out.push(Directive { name, args, block: Some(block(tokens, true)) });
                        break;
                    }
                    Some(a) => args.push(a.to_string()),
                    None => panic!("directive `{name}` has no `;`"),
                }
            }
        }
        assert!(!nested, "a block without its `}}`");
        out
    }
    block(&mut tokens.into_iter().peekable(), false)
}

/// nginx's time syntax (`660s`, `15m`, `1h`, `600`) in seconds.
fn nginx_seconds(t: &str) -> u64 {
    let (n, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = n.parse().unwrap_or_else(|_| panic!("`{t}` is not an nginx time"));
    n * match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        other => panic!("unit `{other}` of `{t}`"),
    }
}

/// nginx on PATH (or where Debian puts it: /usr/sbin is not on every user's PATH).
fn nginx() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).chain([PathBuf::from("/usr/sbin")]).map(|d| d.join("nginx")).find(|p| p.is_file())
}

#[test]
fn the_nginx_config_balances_opu_serve_instances() {
    let rel = "deploy/nginx/opu-serve.conf";
    let conf = parse_nginx(&read(rel));
    let upstreams: Vec<&Directive> = Directive::all(&conf, "upstream").collect();
    assert_eq!(upstreams.len(), 1, "one upstream block");
    let up = upstreams[0];
    let up_name = up.args.first().expect("the upstream's name");
    let items = up.children();
    assert!(Directive::one(items, "least_conn").is_some(), "least_conn: a request goes to the instance with the fewest open ones");
    let servers: Vec<&Directive> = Directive::all(items, "server").collect();
    assert!(servers.len() >= 2, "an upstream of two or more `opu serve` instances, got {}", servers.len());
    for s in &servers {
        assert!(s.args.iter().any(|a| a.starts_with("max_fails=")), "passive health checks: max_fails on {:?}", s.args);
    }

    let vhosts: Vec<&Directive> = Directive::all(&conf, "server").collect();
    assert!(!vhosts.is_empty(), "a server block");
    let location = vhosts
        .iter()
        .flat_map(|v| Directive::all(v.children(), "location"))
        .find(|l| l.args.last().map(String::as_str) == Some("/v1/"))
        .expect("a `location /v1/`");
    let loc = location.children();
    let arg = |name: &str| -> Vec<String> { Directive::one(loc, name).map(|d| d.args.clone()).unwrap_or_else(|| panic!("`{name}` in location /v1/")) };
    assert_eq!(arg("proxy_pass"), vec![format!("http://{up_name}")], "/v1/ goes to the upstream, the path unchanged");
    assert_eq!(arg("proxy_buffering"), vec!["off"], "server-sent events pass through unbuffered");
    // a completion may run as long as opu serve's --request-timeout (default 600 s)
    let read_timeout = nginx_seconds(&arg("proxy_read_timeout")[0]);
    assert!(read_timeout > 600, "proxy_read_timeout {read_timeout} s is not past opu serve's default --request-timeout of 600 s");
    let next = arg("proxy_next_upstream");
    for want in ["error", "http_503", "non_idempotent"] {
        assert!(next.iter().any(|a| a == want), "proxy_next_upstream lacks `{want}` (a 503 of a full or draining instance is retried on another; POST needs non_idempotent): {next:?}");
    }

    // nginx itself: the file included in a minimal main config, everything under a temporary prefix.
    let Some(nginx) = nginx() else {
        eprintln!("SKIPPED nginx -t: nginx not on PATH");
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("nginx-t-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let main = format!(
        "pid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{}}\nhttp {{\n    access_log off;\n    client_body_temp_path {d}/body;\n    \
         proxy_temp_path {d}/proxy;\n    fastcgi_temp_path {d}/fastcgi;\n    uwsgi_temp_path {d}/uwsgi;\n    scgi_temp_path {d}/scgi;\n    \
         include {};\n}}\n",
        repo().join(rel).display()
    );
    std::fs::write(dir.join("nginx.conf"), main).unwrap();
    let mut cmd = Command::new(&nginx);
    cmd.arg("-t").arg("-p").arg(&dir).arg("-e").arg(dir.join("error.log")).arg("-c").arg(dir.join("nginx.conf"));
    let out = run_with_limit(cmd, Duration::from_secs(30));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{} -t refuses {rel}: {said}", nginx.display());
    assert!(said.contains("test is successful"), "{said}");
    eprintln!("{} -t: {rel} is valid", nginx.display());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Flags in `opu <args> --help`.
fn help_flags(args: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_opu")).args(args).arg("--help").output().expect("running opu --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut flags: Vec<String> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_string)
        .collect();
    flags.sort();
    flags.dedup();
    flags
}

#[test]
fn the_serving_doc_names_every_metric_and_flag() {
    let doc = read("docs/serving.md");
    let metrics_rs = read("host/src/serve/metrics.rs");
    // every metric name the registry gets: the string literals `"opu_..."`
    let names: Vec<&str> = metrics_rs.split('"').skip(1).step_by(2).filter(|s| s.starts_with("opu_") && s.chars().all(|c| c.is_ascii_lowercase() || c == '_')).collect();
    assert!(names.len() >= 10, "metric names found in metrics.rs: {names:?}");
    for n in &names {
        assert!(doc.contains(&format!("`{n}`")), "docs/serving.md does not list the metric `{n}`");
    }
    // `opu serve`'s own flags (those `opu run`, which shares the model's, does not have)
    let run = help_flags(&["run"]);
    let serve: Vec<String> = help_flags(&["serve"]).into_iter().filter(|f| !run.contains(f)).collect();
    assert!(serve.iter().any(|f| f == "--max-sessions"), "{serve:?}");
    for f in &serve {
        assert!(doc.contains(&format!("`{f}")) || doc.contains(&format!("{f} ")), "docs/serving.md does not mention `opu serve {f}`");
    }
    // the examples it points to exist
    for rel in ["deploy/kubernetes/opu-serve.yaml", "deploy/nginx/opu-serve.conf"] {
        assert!(doc.contains(rel), "docs/serving.md does not point to {rel}");
        assert!(repo().join(rel).is_file(), "{rel}");
    }
}
