//! A spike for the request path's shape (docs/benchmarks.md, "Stages as layers"): what ten
//! stages cost per request when composed as tower layers, against the same stages called
//! in turn from one async function, as mcpgate's path calls them.
//!
//! The stages are stand-ins of mcpgate's: seven that judge the request without waiting
//! (route, auth, origin, body, headers, policy, pins), two that may wait (limits with a
//! shared store, the audit trail's durable record), one a route may leave out (approvals,
//! absent here), and the back, whose future holds 2 KiB as the real one holds more. Each
//! reads and writes the request so that nothing is folded away.
//!
//! The tower form is the one stable Rust allows: a `Service`'s future is a named type, so
//! a stage that awaits returns a boxed future (an `async` block has no name to give), and
//! the request is owned (a future that outlives `call` cannot borrow it), so it carries
//! the snapshot and the route as `Arc`s. The stages that do not wait return a concrete
//! `Either` of an answer or the inner future, with no box. The plain form borrows all of it.
//!
//! Run: `cargo bench --bench layers` (rounds of both, interleaved, ns per request); under
//! callgrind, `… -- tower N` or `… -- plain N` runs one form N times.

use bytes::Bytes;
use futures_util::future::Either;
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

/// What the configuration says, shared by requests.
struct Live {
    tokens: Vec<[u8; 32]>,
    allowed: Vec<&'static str>,
}

struct Route {
    template: &'static str,
    approvals: bool,
}

/// What a request learns on its way, and what it arrived with: mcpgate's `Ctx` and
/// `ClientRequest` together are about 800 bytes, which `rest` stands for.
#[derive(Default)]
struct Ctx {
    token: Option<usize>,
    era: u8,
    tool: Option<&'static str>,
    permits: u32,
    audited: u32,
    rest: Rest,
}

struct Rest([u64; 96]);

impl Default for Rest {
    fn default() -> Rest {
        Rest([0; 96])
    }
}

type Answer = u64;
type Refused = &'static str;

fn route(live: &Live, route: &Route, ctx: &mut Ctx) -> Result<(), Refused> {
    ctx.permits += (route.template.len() + live.allowed.len()) as u32 & 1;
    Ok(())
}

fn auth(live: &Live, ctx: &mut Ctx) -> Result<(), Refused> {
    let key = black_box([7u8; 32]);
    ctx.token = live.tokens.iter().position(|t| *t == key);
    ctx.token.map(|_| ()).ok_or("unauthorized")
}

fn origin(body: &Bytes, ctx: &mut Ctx) -> Result<(), Refused> {
    ctx.permits += (body.len() & 1) as u32;
    Ok(())
}

fn body(body: &Bytes) -> Result<(), Refused> {
    (body.len() < 1 << 20).then_some(()).ok_or("too large")
}

fn headers(body: &Bytes, ctx: &mut Ctx) -> Result<(), Refused> {
    ctx.era = body.first().copied().unwrap_or(0) & 1;
    ctx.tool = Some("tool_001");
    Ok(())
}

fn policy(live: &Live, ctx: &mut Ctx) -> Result<(), Refused> {
    let tool = ctx.tool.unwrap_or("");
    live.allowed
        .contains(&tool)
        .then_some(())
        .ok_or("forbidden")
}

fn pins(ctx: &mut Ctx) -> Result<(), Refused> {
    ctx.permits += 1;
    ctx.rest.0[ctx.permits as usize % 96] += 1;
    Ok(())
}

async fn limits(ctx: &mut Ctx) -> Result<(), Refused> {
    ready(()).await;
    ctx.permits += 1;
    Ok(())
}

async fn approvals(ctx: &mut Ctx) -> Result<(), Refused> {
    ready(()).await;
    ctx.permits += 2;
    Ok(())
}

async fn audit(ctx: &mut Ctx) -> Result<(), Refused> {
    ready(()).await;
    ctx.audited += 1;
    Ok(())
}

async fn back(body: &Bytes, ctx: &Ctx) -> Result<Answer, Refused> {
    let state = black_box([ctx.era; 2048]);
    ready(()).await;
    let rest = ctx.rest.0[ctx.permits as usize % 96];
    Ok(body.len() as u64 + state[body.len() % 2048] as u64 + ctx.permits as u64 + rest)
}

/// The plain form: the stages in turn, borrowing the request.
async fn plain(live: &Live, r: &Route, bytes: &Bytes, ctx: &mut Ctx) -> Result<Answer, Refused> {
    route(live, r, ctx)?;
    auth(live, ctx)?;
    origin(bytes, ctx)?;
    body(bytes)?;
    headers(bytes, ctx)?;
    policy(live, ctx)?;
    pins(ctx)?;
    limits(ctx).await?;
    if r.approvals {
        approvals(ctx).await?;
    }
    audit(ctx).await?;
    back(bytes, ctx).await
}

/// The tower form's request: owned.
struct Request {
    live: Arc<Live>,
    route: Arc<Route>,
    body: Bytes,
    ctx: Ctx,
}

/// A stage that judges without waiting: a concrete future, no box.
#[derive(Clone)]
struct Judge<S> {
    check: fn(&mut Request) -> Result<(), Refused>,
    inner: S,
}

#[derive(Clone)]
struct JudgeLayer(fn(&mut Request) -> Result<(), Refused>);

impl<S> Layer<S> for JudgeLayer {
    type Service = Judge<S>;
    fn layer(&self, inner: S) -> Judge<S> {
        Judge {
            check: self.0,
            inner,
        }
    }
}

impl<S: Service<Request, Response = Answer, Error = Refused>> Service<Request> for Judge<S> {
    type Response = Answer;
    type Error = Refused;
    type Future = Either<Ready<Result<Answer, Refused>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Refused>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        match (self.check)(&mut req) {
            Ok(()) => Either::Right(self.inner.call(req)),
            Err(e) => Either::Left(ready(Err(e))),
        }
    }
}

type Boxed = Pin<Box<dyn Future<Output = Result<Answer, Refused>> + Send>>;

/// A stage that may wait: its future is an `async` block, which has no name, so boxed.
#[derive(Clone)]
struct Wait<S> {
    stage: u8,
    inner: S,
}

#[derive(Clone)]
struct WaitLayer(u8);

impl<S> Layer<S> for WaitLayer {
    type Service = Wait<S>;
    fn layer(&self, inner: S) -> Wait<S> {
        Wait {
            stage: self.0,
            inner,
        }
    }
}

impl<S> Service<Request> for Wait<S>
where
    S: Service<Request, Response = Answer, Error = Refused> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Answer;
    type Error = Refused;
    type Future = Boxed;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Refused>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Boxed {
        // The ready clone goes into the future; a fresh one stays (tower's usual dance).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let stage = self.stage;
        Box::pin(async move {
            match stage {
                0 => limits(&mut req.ctx).await?,
                1 => approvals(&mut req.ctx).await?,
                _ => audit(&mut req.ctx).await?,
            }
            inner.call(req).await
        })
    }
}

/// The back, innermost.
#[derive(Clone)]
struct Back;

impl Service<Request> for Back {
    type Response = Answer;
    type Error = Refused;
    type Future = Boxed;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Refused>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Boxed {
        Box::pin(async move { back(&req.body, &req.ctx).await })
    }
}

/// One request in `form` ("tower": through `stack`, owning its request; else the plain
/// form, borrowing it).
fn once<S>(
    rt: &tokio::runtime::Runtime,
    form: &str,
    stack: &S,
    live: &Arc<Live>,
    r: &Arc<Route>,
    bytes: &Bytes,
) -> Answer
where
    S: Service<Request, Response = Answer, Error = Refused> + Clone,
{
    if form == "tower" {
        let req = Request {
            live: live.clone(),
            route: r.clone(),
            body: bytes.clone(),
            ctx: Ctx::default(),
        };
        return rt.block_on(stack.clone().oneshot(req)).unwrap();
    }
    let mut ctx = Ctx::default();
    rt.block_on(plain(live, r, bytes, &mut ctx)).unwrap()
}

fn main() {
    let live = Arc::new(Live {
        tokens: (0..10).map(|i| [i as u8; 32]).collect(),
        allowed: vec!["tool_000", "tool_001", "tool_002"],
    });
    let r = Arc::new(Route {
        template: "/gpt-mcp/{token}/mcp",
        approvals: false,
    });
    let bytes = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#);
    // Composed once, as a route would be when its configuration compiles.
    let stack = ServiceBuilder::new()
        .layer(JudgeLayer(|q| route(&q.live, &q.route, &mut q.ctx)))
        .layer(JudgeLayer(|q| auth(&q.live, &mut q.ctx)))
        .layer(JudgeLayer(|q| origin(&q.body, &mut q.ctx)))
        .layer(JudgeLayer(|q| body(&q.body)))
        .layer(JudgeLayer(|q| headers(&q.body, &mut q.ctx)))
        .layer(JudgeLayer(|q| policy(&q.live, &mut q.ctx)))
        .layer(JudgeLayer(|q| pins(&mut q.ctx)))
        .layer(WaitLayer(0))
        .option_layer(r.approvals.then_some(WaitLayer(1)))
        .layer(WaitLayer(2))
        .service(Back);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let tower_once = || once(&rt, "tower", &stack, &live, &r, &bytes);
    let plain_once = || once(&rt, "plain", &stack, &live, &r, &bytes);
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; a form and a count run that form alone.
    let form = args.iter().find(|a| *a == "tower" || *a == "plain");
    if let Some(form) = form {
        let n: u64 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(100_000);
        let mut sum = 0;
        for _ in 0..n {
            sum += match form.as_str() {
                "tower" => tower_once(),
                _ => plain_once(),
            };
        }
        println!("{form} {n}: {sum}");
        return;
    }
    if args.iter().any(|a| a == "threads") {
        // Both forms on two threads at once, sharing the snapshot and the route as two
        // workers do: the tower form's clones of their `Arc`s write lines both threads read.
        for form in ["plain", "tower", "plain", "tower"] {
            let start = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..2 {
                    let (live, r, bytes, stack) = (&live, &r, &bytes, &stack);
                    s.spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .build()
                            .unwrap();
                        let mut sum = 0;
                        for _ in 0..1_000_000 {
                            sum += once(&rt, form, stack, live, r, bytes);
                        }
                        black_box(sum);
                    });
                }
            });
            let ns = start.elapsed().as_nanos() as f64 / 2_000_000.0 * 2.0;
            println!("two threads, {form}: {ns:.1} ns a request on each");
        }
        return;
    }
    const N: u32 = 1_000_000;
    let mut rounds = Vec::new();
    for round in 0..6 {
        let time = |f: &mut dyn FnMut() -> Answer| {
            let start = Instant::now();
            let mut sum = 0;
            for _ in 0..N {
                sum += f();
            }
            black_box(sum);
            start.elapsed().as_nanos() as f64 / N as f64
        };
        let (p, t) = if round % 2 == 0 {
            let p = time(&mut || plain_once());
            (p, time(&mut || tower_once()))
        } else {
            let t = time(&mut || tower_once());
            (time(&mut || plain_once()), t)
        };
        println!("round {round}: plain {p:.1} ns, tower {t:.1} ns a request");
        rounds.push(t - p);
    }
    rounds.sort_by(f64::total_cmp);
    println!(
        "tower minus plain: median {:.1} ns a request (rounds {:.1} to {:.1})",
        rounds[rounds.len() / 2],
        rounds[0],
        rounds[rounds.len() - 1]
    );
}
