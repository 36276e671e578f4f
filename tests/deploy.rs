//! The deploy examples run the replicated shape (docs/scaling.md), and they fit together:
//!
//! - `docker/compose.yaml`: its services are started as processes, the way compose would
//!   start them (their commands, the mounted config, service names mapped to loopback
//!   ports), and serve the demo calls on both replicas, with a rate limit shared in Redis.
//!   No Docker engine runs here, so the image build and compose's own network are not
//!   exercised; everything the files say is.
//! - `deploy/kubernetes/`: every name, port, probe, volume, secret key and selector one
//!   file refers to exists in another, and the ConfigMap, with the Secret's files as the
//!   pod would mount them, passes `mcpgate check`.

mod support;

use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use support::*;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every document of a YAML file.
fn yaml(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// `text` with `from` replaced, which must be in it (so the files cannot drift from the
/// test unnoticed).
fn swap(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} is no longer in the file");
    text.replace(from, to)
}

/// A process killed on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_port(port: u16) {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("nothing listens on {port}");
}

const COMPOSE_GPT: &str = "compose-example-chatgpt-token";
const COMPOSE_READER: &str = "compose-example-reader-token";
const COMPOSE_ADMIN: &str = "compose-example-admin-token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_services_serve_the_demo_calls_on_both_replicas() {
    let compose = &yaml(&root().join("docker/compose.yaml"))[0];
    let services = compose["services"].as_object().unwrap();
    let mut names: Vec<&str> = services.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(names, ["mcpgate-a", "mcpgate-b", "redis", "upstream"]);

    // The image: mcpgate as the entrypoint, `run` on the mounted file by default.
    let docker = std::fs::read_to_string(root().join("docker/Dockerfile")).unwrap();
    for line in [
        "ENTRYPOINT [\"mcpgate\"]",
        "CMD [\"run\"]",
        "ENV MCPGATE_CONFIG=/etc/mcpgate/mcpgate.toml",
    ] {
        assert!(docker.contains(line), "Dockerfile lacks {line}");
    }

    // redis: its command, on a loopback port.
    let redis_cmd = strings(&services["redis"]["command"]);
    assert_eq!(redis_cmd[0], "redis-server");
    let args: Vec<&str> = redis_cmd[1..].iter().map(String::as_str).collect();
    let redis = Redis::start_with(&args);
    assert!(
        redis
            .cli(&["CONFIG", "GET", "maxmemory-policy"])
            .contains("volatile-ttl")
    );

    // upstream: the image's binary with the service's command.
    let up_cmd = strings(&services["upstream"]["command"]);
    let up_port = free_port();
    let args: Vec<String> = up_cmd
        .iter()
        .map(|a| a.replace("0.0.0.0:8000", &format!("127.0.0.1:{up_port}")))
        .collect();
    assert!(args.iter().any(|a| a.ends_with(&format!(":{up_port}"))));
    let _upstream = Process(
        Command::new(env!("CARGO_BIN_EXE_mcpgate"))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_port(up_port).await;

    // The replicas: the mounted file, with the service names as loopback addresses.
    let config = std::fs::read_to_string(root().join("docker/mcpgate.toml")).unwrap();
    let audit = tempfile::tempdir().unwrap();
    let mut replicas = Vec::new();
    let mut published = Vec::new();
    for name in ["mcpgate-a", "mcpgate-b"] {
        let s = &services[name];
        assert_eq!(s["image"], services["upstream"]["image"], "one image");
        assert!(
            strings(&s["volumes"]).contains(&"./mcpgate.toml:/etc/mcpgate/mcpgate.toml:ro".into())
        );
        let port = strings(&s["ports"]).remove(0);
        assert!(
            port.starts_with("127.0.0.1:") && port.ends_with(":8443"),
            "{port}"
        );
        published.push(port);
        assert_eq!(s["stop_grace_period"], "40s");
        let depends = s["depends_on"].as_object().unwrap();
        assert!(depends.contains_key("redis") && depends.contains_key("upstream"));
        let mut text = swap(
            &config,
            "http://upstream:8000/mcp",
            &format!("http://127.0.0.1:{up_port}/mcp"),
        );
        text = swap(&text, "redis://redis:6379/0", &redis.url());
        text = swap(&text, "0.0.0.0:8443", "127.0.0.1:0");
        text = swap(&text, "127.0.0.1:9901", "127.0.0.1:0");
        text = swap(
            &text,
            "/var/log/mcpgate/audit.jsonl",
            &audit
                .path()
                .join(format!("{name}.jsonl"))
                .display()
                .to_string(),
        );
        let path = audit.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        replicas.push(Gateway::start_at(&path));
    }
    assert_ne!(
        published[0], published[1],
        "each replica on its own host port"
    );
    for gw in &replicas {
        wait_store_up(gw, true).await;
    }

    let base = |i: usize| format!("http://{}", replicas[i].listeners["public"]);
    let reader = bearer(COMPOSE_READER);
    let admin = bearer(COMPOSE_ADMIN);
    for i in 0..2 {
        // 1. tools/list as gpt: nine tools, the hidden move_document gone.
        let r = post(
            &format!("{}/gpt-mcp/{COMPOSE_GPT}/mcp", base(i)),
            &[],
            &list(1),
        )
        .await;
        assert_eq!(r.tool_names(), GPT_TOOLS);
        // 2. readonly may not delete.
        let r = post(
            &format!("{}/mcp-readonly", base(i)),
            &[("authorization", &reader)],
            &call(2, "delete_document"),
        )
        .await;
        assert_eq!(r.json()["error"]["code"], -32602, "{}", r.body);
        // 3. an allowed call.
        let r = post(
            &format!("{}/mcp-readonly", base(i)),
            &[("authorization", &reader)],
            &call(3, "get_document"),
        )
        .await;
        assert!(r.json()["result"]["content"].is_array(), "{}", r.body);
        // 4. the hidden tool is unknown even to the allow-all profile.
        let r = post(
            &format!("{}/mcp-gpt-full", base(i)),
            &[("authorization", &admin)],
            &call(4, "move_document"),
        )
        .await;
        assert_eq!(r.json()["error"]["message"], "Unknown tool: move_document");
        // 5. a wrong path token: 404.
        let r = post(
            &format!("{}/gpt-mcp/not-a-token/mcp", base(i)),
            &[],
            &list(5),
        )
        .await;
        assert_eq!(r.status, 404);
    }
    // delete_document: 3 a minute per token, on both replicas together.
    let mut passed = 0;
    for i in 0..6 {
        let r = post(
            &format!("{}/gpt-mcp/{COMPOSE_GPT}/mcp", base(i % 2)),
            &[],
            &call(10 + i as u64, "delete_document"),
        )
        .await;
        match r.status.as_u16() {
            200 => passed += 1,
            429 => {}
            other => panic!("{other}: {}", r.body),
        }
    }
    assert_eq!(passed, 3);
}

/// The Kubernetes files, indexed by kind and name.
struct Cluster {
    objects: HashMap<(String, String), Value>,
}

impl Cluster {
    fn load() -> Cluster {
        let dir = root().join("deploy/kubernetes");
        let kustomization = &yaml(&dir.join("kustomization.yaml"))[0];
        let listed = strings(&kustomization["resources"]);
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|f| f.ends_with(".yaml") && f != "kustomization.yaml")
            .collect();
        on_disk.sort();
        let mut sorted = listed.clone();
        sorted.sort();
        assert_eq!(sorted, on_disk, "kustomization.yaml lists every file");
        let mut objects = HashMap::new();
        for file in listed {
            for doc in yaml(&dir.join(&file)) {
                let kind = doc["kind"].as_str().unwrap().to_string();
                let name = doc["metadata"]["name"].as_str().unwrap().to_string();
                assert!(doc["apiVersion"].is_string(), "{file}: {kind}/{name}");
                assert!(
                    objects.insert((kind.clone(), name.clone()), doc).is_none(),
                    "{kind}/{name} twice"
                );
            }
        }
        Cluster { objects }
    }

    fn get(&self, kind: &str, name: &str) -> &Value {
        self.objects
            .get(&(kind.to_string(), name.to_string()))
            .unwrap_or_elem(kind, name)
    }

    fn secret_keys(&self, name: &str) -> Vec<String> {
        self.get("Secret", name)["stringData"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }
}

trait OrElem<'a> {
    fn unwrap_or_elem(self, kind: &str, name: &str) -> &'a Value;
}

impl<'a> OrElem<'a> for Option<&'a Value> {
    fn unwrap_or_elem(self, kind: &str, name: &str) -> &'a Value {
        self.unwrap_or_else(|| panic!("no {kind} named {name} in deploy/kubernetes"))
    }
}

/// Whether `selector` (matchLabels or a Service's selector) picks pods labelled `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let sel = selector.get("matchLabels").unwrap_or(selector);
    sel.as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
}

fn port_named<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no port named {name}"))
}

#[test]
fn the_kubernetes_files_fit_together_and_the_config_passes_check() {
    let k = Cluster::load();
    let deploy = k.get("Deployment", "mcpgate");
    let spec = &deploy["spec"];
    assert_eq!(spec["replicas"], 2);
    let pod = &spec["template"];
    let labels = &pod["metadata"]["labels"];
    assert!(selects(&spec["selector"], labels));
    let container = &pod["spec"]["containers"][0];
    let mounts = container["volumeMounts"].as_array().unwrap();
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    let volume = |name: &Value| volumes.iter().find(|v| &v["name"] == name).unwrap();

    // The config file the args name is the ConfigMap's, mounted there.
    let args = strings(&container["args"]);
    assert_eq!(args[..2], ["run", "-c"]);
    let config_path = Path::new(&args[2]);
    let mount = mounts
        .iter()
        .find(|m| Path::new(m["mountPath"].as_str().unwrap()) == config_path.parent().unwrap())
        .expect("the config folder is mounted");
    let cm_name = volume(&mount["name"])["configMap"]["name"]
        .as_str()
        .unwrap();
    let file = config_path.file_name().unwrap().to_str().unwrap();
    let toml_text = k.get("ConfigMap", cm_name)["data"][file]
        .as_str()
        .unwrap()
        .to_string();
    let config: toml::Table = toml::from_str(&toml_text).unwrap();

    // Probes on the admin listener's port; readiness on /readyz (503 while draining).
    let admin_port: u16 = config["admin"]["addr"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(port_named(container, "admin")["containerPort"], admin_port);
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], "admin");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    let listen_port: u16 = config["listen"][0]["addr"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(port_named(container, "mcp")["containerPort"], listen_port);
    // preStop, then SIGTERM and shutdown_grace (30 s by default), within the grace period.
    let pre_stop = strings(&container["lifecycle"]["preStop"]["exec"]["command"]);
    assert_eq!(pre_stop[0], "sleep");
    let pre_stop: u64 = pre_stop[1].parse().unwrap();
    assert!(
        config
            .get("server")
            .and_then(|s| s.get("shutdown_grace"))
            .is_none(),
        "default 30 s assumed"
    );
    assert!(
        pod["spec"]["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap()
            > pre_stop + 30
    );

    // The Service, the PodDisruptionBudget and the autoscaler point at these pods.
    let service = k.get("Service", "mcpgate");
    assert!(selects(&service["spec"]["selector"], labels));
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "mcp");
    let pdb = k.get("PodDisruptionBudget", "mcpgate");
    assert!(selects(&pdb["spec"]["selector"], labels));
    assert!(pdb["spec"]["minAvailable"].as_u64().unwrap() < 2);
    let hpa = k.get("HorizontalPodAutoscaler", "mcpgate");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "mcpgate");
    assert!(hpa["spec"]["minReplicas"].as_u64().unwrap() >= 2);

    // Every ${file:…} is a key of a Secret mounted at its folder.
    let mut files: HashMap<String, (String, String)> = HashMap::new();
    for reference in toml_text.split("${file:").skip(1) {
        let path = &reference[..reference.find('}').unwrap()];
        let (dir, key) = path.rsplit_once('/').unwrap();
        let mount = mounts
            .iter()
            .find(|m| m["mountPath"] == dir)
            .unwrap_or_else(|| panic!("{dir} is not mounted"));
        let secret = volume(&mount["name"])["secret"]["secretName"]
            .as_str()
            .unwrap();
        assert!(
            k.secret_keys(secret).contains(&key.to_string()),
            "{secret} lacks {key}"
        );
        files.insert(path.to_string(), (secret.to_string(), key.to_string()));
    }
    assert!(
        !toml_text.contains("${env:"),
        "no environment is set for it"
    );
    let session_key = config["upstreams"]["agent-data"]["session_key"]
        .as_str()
        .unwrap();
    assert!(
        session_key.starts_with("${file:"),
        "the session key is a Secret's"
    );

    // The endpoints are the StatefulSet's pods, through its headless Service.
    let sts = k.get("StatefulSet", "mcp-server");
    let governing = sts["spec"]["serviceName"].as_str().unwrap();
    let headless = k.get("Service", governing);
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert!(selects(
        &headless["spec"]["selector"],
        &sts["spec"]["template"]["metadata"]["labels"]
    ));
    let server_port =
        port_named(&sts["spec"]["template"]["spec"]["containers"][0], "mcp")["containerPort"]
            .as_u64()
            .unwrap();
    let endpoints: Vec<String> = config["upstreams"]["agent-data"]["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect();
    let expected: Vec<String> = (0..sts["spec"]["replicas"].as_u64().unwrap())
        .map(|i| format!("http://mcp-server-{i}.{governing}:{server_port}/mcp"))
        .collect();
    assert_eq!(endpoints, expected);

    // Redis: the address is its Service; the password is the same Secret key mcpgate reads.
    let store = &config["limits"]["store"];
    let redis_url = store["redis"].as_str().unwrap();
    let redis_service = k.get("Service", "mcpgate-redis");
    assert_eq!(
        redis_url,
        format!(
            "redis://mcpgate-redis:{}/0",
            redis_service["spec"]["ports"][0]["port"]
        )
    );
    let redis = k.get("Deployment", "mcpgate-redis");
    assert!(selects(
        &redis_service["spec"]["selector"],
        &redis["spec"]["template"]["metadata"]["labels"]
    ));
    let redis_env =
        &redis["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"];
    let password_file = store["password"].as_str().unwrap();
    let (secret, key) = &files[password_file
        .trim_start_matches("${file:")
        .trim_end_matches('}')];
    assert_eq!(
        (
            redis_env["name"].as_str().unwrap(),
            redis_env["key"].as_str().unwrap()
        ),
        (&secret[..], &key[..])
    );

    // Network policies: clients to the MCP port, Redis and the server only from mcpgate.
    let policy = k.get("NetworkPolicy", "mcpgate");
    assert!(selects(&policy["spec"]["podSelector"], labels));
    let ports: Vec<&Value> = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["ports"][0]["port"])
        .collect();
    assert!(
        ports.contains(&&Value::from(listen_port)) && ports.contains(&&Value::from(admin_port))
    );
    for name in ["mcpgate-redis", "mcp-server"] {
        let p = k.get("NetworkPolicy", name);
        assert!(
            selects(&p["spec"]["ingress"][0]["from"][0]["podSelector"], labels),
            "{name}"
        );
    }

    // `mcpgate check` on the ConfigMap, the Secrets' files as the pod mounts them (the
    // placeholders filled in as their comments say).
    let mounted = tempfile::tempdir().unwrap();
    let mut text = toml_text.clone();
    for (path, (_, key)) in &files {
        let value = match key.as_str() {
            k if k.ends_with(".sha256") => hash(k),
            "session-key" => "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".into(),
            _ => "a-redis-password".into(),
        };
        let local = mounted.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(local.parent().unwrap()).unwrap();
        std::fs::write(&local, format!("{value}\n")).unwrap();
        text = text.replace(
            &format!("${{file:{path}}}"),
            &format!("${{file:{}}}", local.display()),
        );
    }
    // The audit trail's volume, as the Deployment mounts it (`check` wants its folder).
    let deployment =
        std::fs::read_to_string(root().join("deploy/kubernetes/mcpgate.yaml")).unwrap();
    assert!(deployment.contains("mountPath: /var/log/mcpgate }"));
    let logs = mounted.path().join("var/log/mcpgate");
    std::fs::create_dir_all(&logs).unwrap();
    text = text.replace("/var/log/mcpgate", &logs.display().to_string());
    let path = mounted.path().join("mcpgate.toml");
    std::fs::write(&path, &text).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
        .args(["check", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{}\n{text}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("store:     redis://mcpgate-redis:6379/0")
            && !out.contains("a-redis-password"),
        "{out}"
    );
}
