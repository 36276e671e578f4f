//! The store's script and its calls: how a batch is encoded, the script run on a real
//! `redis-server` against a request-by-request GCRA, and replies that do not fit.

use super::*;

fn cells(key: &str, interval_us: u64, burst: u32, count: u32) -> Cells {
    Cells {
        key: key.into(),
        interval_us,
        burst,
        count,
    }
}

fn words(cmd: &redis::Cmd) -> Vec<String> {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => String::from_utf8(b.to_vec()).unwrap(),
            _ => panic!("the script call has no cursor"),
        })
        .collect()
}

/// Each key goes once in KEYS with its tolerance; runs of alike requests go once
/// with their length and costs; requests keep their order (a later one sees what an
/// earlier took).
#[test]
fn a_batch_names_each_key_once_and_each_run_of_alike_requests_once() {
    let token = cells("t", 1_000, 60, 1);
    let global = cells("g", 10, 1_000, 1);
    let tool_twice = cells("T", 6_000, 6, 2);
    let a: Keys = [token.clone(), global.clone()].into_iter().collect();
    let b: Keys = [token.clone(), tool_twice.clone(), global.clone()]
        .into_iter()
        .collect();
    let batch = [&a[..], &a[..], &a[..], &b[..], &a[..]];
    let cmd = script_call("sha", batch.iter().copied());
    let expected = [
        "EVALSHA", "sha", "3", "t", "g", "T", // three distinct keys
        "60000", "10000", "36000", // their tolerances, in KEYS order
        "3", "2", "1", "1000", "2", "10", // three alike: t and g, a cell each
        "1", "3", "1", "1000", "3", "12000", "2", "10", // then one with T taking two
        "1", "2", "1", "1000", "2", "10", // then the first kind again
    ];
    assert_eq!(words(&cmd), expected);

    // Alone: one request, its keys.
    let one = script_call("sha", [&a[..]].into_iter());
    assert_eq!(
        words(&one),
        [
            "EVALSHA", "sha", "2", "t", "g", "60000", "10000", "1", "2", "1", "1000", "2", "10"
        ]
    );

    // A request naming a key twice is never part of a run.
    let twice: Keys = [token.clone(), token.clone()].into_iter().collect();
    let cmd = script_call("sha", [&twice[..], &twice[..]].into_iter());
    assert_eq!(
        words(&cmd)[4..],
        [
            "60000", "1", "2", "1", "1000", "1", "1000", "1", "2", "1", "1000", "1", "1000"
        ]
    );
}

/// A `redis-server` on a free loopback port, stopped when dropped.
struct RedisServer(std::process::Child, u16);

impl RedisServer {
    fn start() -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let child = std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test.sh installs Debian's redis-server)");
        let server = RedisServer(child, port);
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return server;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not start on port {port}");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A whole number of these is what the script test's times are made of.
const UNIT: u64 = 10_000_000;

/// The script against a real redis-server and a request-by-request GCRA: random
/// batches (runs of alike requests, keys shared between kinds, several cells, a key
/// named twice) get the answers and leave the times the model gives.
///
/// The model counts whole `UNIT`s from Redis's clock just before the call: each key
/// starts at least a unit ahead of it, so the few µs until the script reads the
/// clock again decide nothing, and a refused request's wait rounds up to the model's.
#[test]
fn the_script_judges_a_batch_as_request_after_request() {
    use proptest::prelude::*;
    let server = RedisServer::start();
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/0", server.1)).unwrap();
    let redis = std::cell::RefCell::new(client.get_connection().unwrap());
    let script = redis::Script::new(GCRA);
    let hash: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(GCRA)
        .query(&mut *redis.borrow_mut())
        .unwrap();
    assert_eq!(hash, script.get_hash());
    let names = ["a", "b", "c"];

    // Per key: interval and burst (units), and how far ahead it starts; kinds of
    // request (key, cells); the batch, as kinds.
    let keys = proptest::collection::vec((1..4u64, 1..6u32, 1..8u64), 3);
    let kind = proptest::collection::vec((0..3usize, 1..3u32), 1..4);
    let kinds = proptest::collection::vec(kind, 1..4);
    let order = proptest::collection::vec((0..4usize, 1..5usize), 1..8);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 128,
        ..ProptestConfig::default()
    });
    runner
        .run(&(keys, kinds, order), |(keys, kinds, order)| {
            let redis = &mut *redis.borrow_mut();
            let batch: Vec<Keys> = order
                .iter()
                .flat_map(|&(k, times)| std::iter::repeat_n(k % kinds.len(), times))
                .map(|k| {
                    kinds[k]
                        .iter()
                        .map(|&(key, count)| {
                            cells(names[key], keys[key].0 * UNIT, keys[key].1, count)
                        })
                        .collect()
                })
                .collect();
            let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(redis).unwrap();
            let start = seconds * 1_000_000 + micros;
            let mut tat: Vec<u64> = keys.iter().map(|k| k.2).collect();
            for (name, ahead) in names.iter().zip(&tat) {
                let _: () = redis::cmd("SET")
                    .arg(*name)
                    .arg(start + ahead * UNIT)
                    .arg("PX")
                    .arg(600_000)
                    .query(redis)
                    .unwrap();
            }
            let reply: redis::Value = script_call(&hash, batch.iter().map(|k| &k[..]))
                .query(redis)
                .unwrap();
            let got = waits(&reply, batch.len()).expect("one answer per request");
            for (request, wait) in batch.iter().zip(got) {
                let key = |c: &Cells| names.iter().position(|n| *n == c.key).unwrap();
                // Whole units over the limit, per cell taken; the request passes when
                // no key is over.
                let over = request
                    .iter()
                    .map(|c| {
                        let k = key(c);
                        (tat[k] + keys[k].0 * u64::from(c.count)) as i64
                            - (keys[k].0 * u64::from(keys[k].1)) as i64
                    })
                    .max()
                    .unwrap();
                if over <= 0 {
                    prop_assert_eq!(wait, 0);
                    for c in request {
                        tat[key(c)] += keys[key(c)].0 * u64::from(c.count);
                    }
                } else {
                    prop_assert_eq!(wait.div_ceil(UNIT), over as u64, "wait {}", wait);
                }
            }
            for (name, ahead) in names.iter().zip(&tat) {
                let stored: u64 = redis::cmd("GET").arg(*name).query(redis).unwrap();
                prop_assert_eq!(stored, start + ahead * UNIT, "key {}", name);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn replies_fit_the_batch_or_are_refused() {
    assert_eq!(waits(&redis::Value::Int(0), 3), Some(vec![0, 0, 0]));
    let text = |s: &str| redis::Value::BulkString(s.as_bytes().to_vec());
    assert_eq!(waits(&text("0 1500 0"), 3), Some(vec![0, 1500, 0]));
    assert_eq!(waits(&text("0 1500"), 3), None, "too few answers");
    assert_eq!(waits(&text("0 x 0"), 3), None, "not a number");
    assert_eq!(waits(&redis::Value::Int(7), 1), None);
    assert_eq!(waits(&redis::Value::Nil, 1), None);
}
