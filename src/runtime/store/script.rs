//! The GCRA script every rate rule of a batch of requests is counted by, its call made of
//! the batch's keys, and its reply read.

use super::*;

/// GCRA over the keys of a batch of requests, in arrival order. `KEYS` holds each key of
/// the batch once; a key holds its theoretical arrival time (µs of the Redis clock).
/// `ARGV` holds, per key in that order, its tolerance (interval × burst, µs); then the
/// requests, each run of alike ones (the same keys and cells: one caller's calls, most of
/// the time) once: how many there are in the run, their number of keys and, per key, the
/// key's place in `KEYS` and its cost (interval × cells, µs). Each request takes every
/// one of its keys' cells or none, and a later request sees what an earlier one took.
///
/// A run is judged in one step, whatever its length: its requests are alike, so the
/// first `pass` of them pass and the rest do not, where `pass` is the fewest any of its
/// keys has room for, `⌊(tolerance + now − tat) / cost⌋` (exact in Lua's doubles while
/// tolerance + now stays below 2⁵³ µs, a tolerance of up to about 200 years). Each
/// refused one waits as long as the first refused would, since a refusal takes nothing.
/// That is the request-by-request answer as long as a request names a key once, which
/// `script_call` sees to. The stored times mean what they meant to the script before
/// this one, so replicas of both versions can share a Redis during a rolling upgrade.
///
/// The reply is the integer 0 when every request passed (the usual case, and the
/// cheapest reply to read), else each request's answer (0, or how many µs until it would
/// pass) as one string of numbers and spaces. Keys are read once (one MGET) and each
/// changed key written once. A key expires when its cells are all back, so idle keys
/// cost Redis nothing. Times are written with `%d`: Lua's default number format keeps 14
/// digits, and µs since 1970 have 16.
pub(super) const GCRA: &str = r"
local clock = redis.call('TIME')
local now = clock[1] * 1000000 + clock[2]
local tat = redis.call('MGET', unpack(KEYS))
for i = 1, #KEYS do
  local t = tonumber(tat[i])
  if t == nil or t < now then t = now end
  tat[i] = t
end
local floor, changed, waits = math.floor, {}, nil
local a, r = #KEYS + 1, 0
while a <= #ARGV do
  local alike, last = tonumber(ARGV[a]), a + 1 + 2 * tonumber(ARGV[a + 1])
  local pass = alike
  for j = a + 2, last, 2 do
    local i = tonumber(ARGV[j])
    local room = floor((ARGV[i] + now - tat[i]) / ARGV[j + 1])
    if room < pass then pass = room end
  end
  if pass < 0 then pass = 0 end
  local wait = 0
  for j = a + 2, last, 2 do
    local i, cost = tonumber(ARGV[j]), tonumber(ARGV[j + 1])
    if pass > 0 then
      tat[i] = tat[i] + pass * cost
      changed[i] = true
    end
    local over = tat[i] + cost - ARGV[i] - now
    if over > wait then wait = over end
  end
  if pass < alike then
    waits = waits or {}
    for q = r + pass + 1, r + alike do waits[q] = wait end
  end
  r = r + alike
  a = last + 1
end
for i in pairs(changed) do
  redis.call('SET', KEYS[i], string.format('%d', tat[i]), 'PX', math.ceil((tat[i] - now) / 1000))
end
if waits == nil then return 0 end
local answers = {}
for q = 1, r do answers[q] = string.format('%d', waits[q] or 0) end
return table.concat(answers, ' ')
";

/// The EVALSHA of [`GCRA`] (by `hash`) for a batch of requests' keys: each key once in
/// `KEYS`, with its tolerance; each run of alike requests once, their keys by their place
/// there and their cost. A request that names a key twice (no rule set makes one) stays
/// a run of its own, which the script judges exactly.
pub(super) fn script_call<'a>(hash: &str, batch: impl Iterator<Item = &'a [Cells]>) -> redis::Cmd {
    let mut distinct: Vec<&Cells> = Vec::new();
    let mut place: HashMap<&str, usize> = HashMap::new();
    let mut requests = Vec::new();
    let mut batch = batch.peekable();
    while let Some(cells) = batch.next() {
        let mut alike = 1;
        if names_each_key_once(cells) {
            while batch.next_if(|next| *next == cells).is_some() {
                alike += 1;
            }
        }
        requests.push(alike);
        requests.push(cells.len() as u64);
        for c in cells {
            let at = *place.entry(c.key.as_str()).or_insert_with(|| {
                distinct.push(c);
                distinct.len()
            });
            requests.push(at as u64);
            requests.push(c.interval_us.saturating_mul(u64::from(c.count)));
        }
    }
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(hash).arg(distinct.len());
    for c in &distinct {
        cmd.arg(c.key.as_str());
    }
    for c in &distinct {
        cmd.arg(c.interval_us.saturating_mul(u64::from(c.burst)));
    }
    for n in requests {
        cmd.arg(n);
    }
    cmd
}

pub(super) fn names_each_key_once(cells: &[Cells]) -> bool {
    cells
        .iter()
        .enumerate()
        .all(|(i, c)| cells[..i].iter().all(|earlier| earlier.key != c.key))
}

/// The answers of `n` requests in the script's reply: 0 (all passed) or their waits.
pub(super) fn waits(reply: &redis::Value, n: usize) -> Option<Vec<u64>> {
    match reply {
        redis::Value::Int(0) => Some(vec![0; n]),
        redis::Value::BulkString(text) => {
            let waits: Vec<u64> = std::str::from_utf8(text)
                .ok()?
                .split(' ')
                .map(|w| w.parse().ok())
                .collect::<Option<_>>()?;
            (waits.len() == n).then_some(waits)
        }
        _ => None,
    }
}
