//! The `mcpgate` command line: parses arguments, sets up logging and the runtime, and
//! calls into the library. No request logic lives here.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use mcpgate::cli::demo;
use mcpgate::cli::run as server;
use mcpgate::config::{self, token};
use mcpgate::gateway::Gateway;
use mcpgate::observe::audit::VerifyError;
use std::io::{IsTerminal, Read};
use std::net::SocketAddr;
use std::path::PathBuf;

/// mimalloc: a request's allocations are freed on the thread that made them, which it makes
/// cheaper than glibc's malloc does, with the same memory (docs/benchmarks.md, "Allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "mcpgate",
    version,
    about = "A gateway for MCP servers: per-token profiles, tool policy, JSON/SSE"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve with a configuration file.
    Run {
        /// Config file [default: $MCPGATE_CONFIG, then config/mcpgate.toml]
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Validate a configuration file and print the effective table (like `nginx -t`).
    Check {
        /// Config file [default: $MCPGATE_CONFIG, then config/mcpgate.toml]
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Also read the tool lists of each federated profile's members and print the
        /// names its clients would see, and any collision.
        #[arg(long)]
        probe: bool,
    },
    /// Make or hash tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Work with audit files.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Review and approve the definitions of pinned upstreams' tools (docs/pinning.md).
    #[command(subcommand)]
    Pin(PinCommand),
    /// Exit 0 if the admin listener answers /healthz, or /readyz with --ready (for
    /// container probes: the admin listener can stay on loopback).
    Healthcheck {
        /// The admin address.
        #[arg(long, default_value = "127.0.0.1:9901")]
        admin: SocketAddr,
        /// Check readiness (503 while draining) instead of liveness.
        #[arg(long)]
        ready: bool,
    },
    /// Print shell completions (bash, zsh, fish, elvish, powershell) to stdout.
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff) to stdout: `mcpgate man > /usr/share/man/man1/mcpgate.1`;
    /// `mcpgate man run` prints the page of `mcpgate run` (`mcpgate-run(1)`), and
    /// `--dir /usr/share/man/man1` writes every page there.
    Man {
        /// The command whose page to print (`run`, `check`, `token`, …).
        command: Option<String>,
        /// Write mcpgate.1 and every command's page into this folder instead.
        #[arg(long, conflicts_with = "command")]
        dir: Option<PathBuf>,
    },
    /// Run the sample MCP server alone, to try mcpgate against: the small document store
    /// the demo uses (JSON or SSE, over HTTP or stdio), or N generated tools for load tests.
    SampleUpstream {
        #[arg(long, default_value = "127.0.0.1:8000")]
        listen: SocketAddr,
        /// Answer in SSE (with a priming event) instead of JSON.
        #[arg(long)]
        sse: bool,
        /// List this many generated tools (`tool_000`, `tool_001`, …), each of which answers
        /// a call with its arguments, instead of the document store's tools.
        #[arg(long)]
        tools: Option<usize>,
        /// Every tools/call result carries a text of this many bytes.
        #[arg(long)]
        result_bytes: Option<usize>,
        /// Serve GET streams: one notification per second, held open.
        #[arg(long)]
        streams: bool,
        /// Speak MCP over stdin and stdout instead of listening (a stdio server).
        #[arg(long)]
        stdio: bool,
    },
    /// Start a sample MCP server and the gateway in front of it, and print curl commands.
    Demo {
        /// Where the gateway listens.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
    },
}

#[derive(Subcommand)]
enum PinCommand {
    /// Read the upstreams' tools and prompts and print what is new, changed or removed
    /// since it was approved, with a diff; exit 1 when anything awaits approval.
    Review {
        /// Config file [default: $MCPGATE_CONFIG, then config/mcpgate.toml]
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Only this upstream [default: every pinned one].
        #[arg(long)]
        upstream: Option<String>,
    },
    /// Approve tools and prompts as the upstreams list them now, in the pins file.
    Approve {
        /// Config file [default: $MCPGATE_CONFIG, then config/mcpgate.toml]
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// Only this upstream [default: every pinned one].
        #[arg(long)]
        upstream: Option<String>,
        /// A tool to approve (repeatable), by the upstream's own name.
        #[arg(long = "tool")]
        tools: Vec<String>,
        /// A prompt to approve (repeatable).
        #[arg(long = "prompt")]
        prompts: Vec<String>,
        /// Every tool and prompt listed now; approved ones no longer listed are dropped.
        #[arg(long, conflicts_with_all = ["tools", "prompts"])]
        all: bool,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Walk the file's hash chain; exit non-zero naming the first broken line.
    Verify { file: PathBuf },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Print a new random token (256 bits, URL-safe) and the TOML that registers its hash.
    New {
        /// The id logs and metrics will show for this token.
        #[arg(long)]
        id: Option<String>,
        /// A profile the token may use (repeatable).
        #[arg(long = "profile")]
        profiles: Vec<String>,
    },
    /// Read a token on stdin and print its SHA-256 (the `sha256` of `[[tokens]]`).
    Hash,
}

/// `mcpgate pin review|approve`: the lists are read through a gateway of this
/// configuration that listens nowhere and writes no audit trail.
fn pin(command: PinCommand) -> Result<()> {
    use mcpgate::cli::pin;
    let (config, upstream) = match &command {
        PinCommand::Review { config, upstream }
        | PinCommand::Approve {
            config, upstream, ..
        } => (config.clone(), upstream.clone()),
    };
    let mut snapshot = config::compile::load_for_pins(&config_path(config))?;
    snapshot.audit = None;
    let book = (*snapshot.pins).clone();
    let pins_path = snapshot.pins_path.clone();
    let reviews = runtime()?.block_on(async {
        let gw = Gateway::new(snapshot, None)?;
        let reviews = pin::review(&gw, upstream.as_deref()).await;
        gw.close_stdio().await;
        anyhow::Ok(reviews)
    })?;
    let reviews = reviews.map_err(anyhow::Error::msg)?;
    match command {
        PinCommand::Review { .. } => {
            out(pin::report(&reviews))?;
            if reviews
                .iter()
                .any(|r| r.unapproved().next().is_some() || !r.removed.is_empty())
            {
                std::process::exit(1);
            }
            Ok(())
        }
        PinCommand::Approve {
            tools,
            prompts,
            all,
            ..
        } => {
            if !all && tools.is_empty() && prompts.is_empty() {
                bail!(
                    "name what to approve: --tool NAME, --prompt NAME (each repeatable), or --all"
                );
            }
            let mut book = book;
            let done = pin::approve(
                &mut book,
                &reviews,
                &pin::Choice {
                    tools,
                    prompts,
                    all,
                },
            )
            .map_err(anyhow::Error::msg)?;
            if done.is_empty() {
                out("nothing to approve: every definition asked for is approved already\n")?;
                return Ok(());
            }
            pin::write(pins_path.as_deref(), &book).map_err(anyhow::Error::msg)?;
            for line in done {
                out(format!("{line}\n"))?;
            }
            Ok(())
        }
    }
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = dispatch(cli.command) {
        eprintln!("mcpgate: {e:#}");
        std::process::exit(1);
    }
}

/// Writes `text` to stdout. A reader that stopped reading (`mcpgate man | head`) is not an
/// error: the rest is not wanted.
fn out(text: impl std::fmt::Display) -> Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match write!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("writing to stdout"),
    }
}

/// `mcpgate man`: the page of mcpgate or of one of its commands to stdout, or every page
/// into `dir` (the main page names the commands' pages, `mcpgate-run(1)` and so on).
fn man(command: Option<&str>, dir: Option<&std::path::Path>) -> Result<()> {
    // `help` is clap's, with no page of its own: the pages do not name it.
    let cmd = <Cli as clap::CommandFactory>::command()
        .disable_help_subcommand(true)
        .mut_subcommands(|c| c.disable_help_subcommand(true));
    if let Some(dir) = dir {
        clap_mangen::generate_to(cmd, dir)
            .with_context(|| format!("writing the man pages into {}", dir.display()))?;
        return Ok(());
    }
    let page = match command {
        None => cmd,
        Some(name) => {
            let Some(sub) = cmd.find_subcommand(name) else {
                let names: Vec<&str> = cmd
                    .get_subcommands()
                    .map(clap::Command::get_name)
                    .filter(|n| *n != "help")
                    .collect();
                bail!("no command {name:?}: one of {}", names.join(", "));
            };
            // Named as the main page names it.
            // Leaked once, for the life of this short command: clap names are `'static`.
            let full: &'static str = Box::leak(format!("mcpgate-{}", sub.get_name()).into());
            sub.clone().name(full)
        }
    };
    let mut text = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut text)
        .context("rendering the man page")?;
    out(String::from_utf8_lossy(&text))
}

fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Check { config, probe } => check(config, probe),
        Command::Pin(command) => pin(command),
        Command::Run { config } => {
            let path = config_path(config);
            let snapshot = config::load(&path)?;
            init_logging(&snapshot.log);
            for w in &snapshot.warnings {
                tracing::warn!("{w}");
            }
            runtime()?.block_on(async {
                let gw = Gateway::new(snapshot, Some(path))?;
                server::run(gw, shutdown_signal()).await?;
                tracing::info!("stopped");
                Ok(())
            })
        }
        Command::Demo { listen } => {
            init_logging(&config::LogSettings {
                format: config::LogFormat::Auto,
                level: None,
                slow_request: config::compile::DEFAULT_SLOW_REQUEST,
            });
            runtime()?.block_on(demo::run(listen, shutdown_signal()))?;
            Ok(())
        }
        Command::Token(TokenCommand::New { id, profiles }) => {
            let secret = token::generate().context("reading random bytes from the OS")?;
            let hash = token::Secret(&secret).hash();
            let id = id.unwrap_or_else(|| format!("token-{}", &token::to_hex(&hash)[..8]));
            out(format!(
                "token: {secret}\n\n# add to the configuration (only the hash is stored):\n{}",
                token::toml_entry(&id, &hash, &profiles)
            ))?;
            Ok(())
        }
        Command::Healthcheck { admin, ready } => {
            let path = if ready { "/readyz" } else { "/healthz" };
            let status = runtime()?.block_on(healthcheck(admin, path))?;
            if status != 200 {
                bail!("http://{admin}{path} answered {status}");
            }
            Ok(())
        }
        Command::SampleUpstream {
            listen,
            sse,
            tools,
            result_bytes,
            streams,
            stdio,
        } => sample_upstream(listen, sse, tools, result_bytes, streams, stdio),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut cmd, "mcpgate", &mut text);
            out(String::from_utf8_lossy(&text))
        }
        Command::Man { command, dir } => man(command.as_deref(), dir.as_deref()),
        Command::Audit(AuditCommand::Verify { file }) => verify(&file),
        Command::Token(TokenCommand::Hash) => {
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .context("reading the token from stdin")?;
            let secret = input.trim_end_matches(['\n', '\r']);
            if secret.is_empty() {
                bail!("no token on stdin");
            }
            out(format!(
                "{}\n",
                token::to_hex(&token::Secret(secret).hash())
            ))?;
            Ok(())
        }
    }
}

/// `mcpgate check`: the file described (or refused), and with `--probe` what each
/// federated profile's members list.
fn check(config: Option<PathBuf>, probe: bool) -> Result<()> {
    let path = config_path(config);
    let mut snapshot = config::load(&path)?;
    // What `run` would stop on besides the file itself (the audit file, TLS).
    let pre = mcpgate::cli::check::preflight(&snapshot);
    if !pre.errors.is_empty() {
        bail!("{}: {}", path.display(), pre.errors.join("\n"));
    }
    snapshot.warnings.extend(pre.warnings);
    out(snapshot.describe())?;
    if probe {
        // The probe sends through the gateway's own request path, without writing
        // an audit trail or listening anywhere.
        snapshot.audit = None;
        let listing = runtime()?.block_on(async {
            let gw = Gateway::new(snapshot, None)?;
            let listing = mcpgate::pipeline::back::federated::probe(&gw).await;
            gw.close_stdio().await;
            anyhow::Ok(listing)
        })?;
        out(listing)?;
    }
    Ok(())
}

/// `mcpgate sample-upstream`: the sample MCP server, over HTTP or stdio.
fn sample_upstream(
    listen: SocketAddr,
    sse: bool,
    tools: Option<usize>,
    result_bytes: Option<usize>,
    streams: bool,
    stdio: bool,
) -> Result<()> {
    let opts = mcpgate::cli::sample::Options {
        mode: if sse {
            mcpgate::cli::sample::Mode::Sse
        } else {
            mcpgate::cli::sample::Mode::Json
        },
        generated_tools: tools,
        result_bytes,
        stream: streams.then_some((usize::MAX, std::time::Duration::from_secs(1))),
        record: false,
        ..Default::default()
    };
    if stdio {
        return mcpgate::cli::sample::serve_stdio(opts).context("serving over stdio");
    }
    runtime()?.block_on(async {
        let server = mcpgate::cli::sample::start(listen, opts)
            .await
            .context("starting the sample server")?;
        eprintln!("sample upstream on {}", server.url());
        shutdown_signal().await;
        Ok(())
    })
}

/// `mcpgate audit verify`: the chain of a trail checked, line by line.
fn verify(file: &std::path::Path) -> Result<()> {
    match mcpgate::observe::audit::verify(file) {
        Ok(v) => {
            out(format!(
                "{}: {} lines, chain intact\n",
                file.display(),
                v.lines
            ))?;
            if let Some(bytes) = v.torn_tail {
                out(format!(
                    "{}: then {bytes} bytes of a last line a crash cut short; mcpgate marks it with a \"recovered\" record when it next starts on this file\n",
                    file.display()
                ))?;
            }
            Ok(())
        }
        Err(VerifyError::Broken { line, why }) => {
            bail!("{}:{line}: chain broken: {why}", file.display())
        }
        Err(e) => bail!("{e}"),
    }
}

async fn healthcheck(admin: SocketAddr, path: &str) -> Result<u16> {
    let ask = async {
        let stream = tokio::net::TcpStream::connect(admin).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let request = http::Request::get(path)
            .header(http::header::HOST, admin.to_string())
            .body(http_body_util::Empty::<bytes::Bytes>::new())?;
        anyhow::Ok(sender.send_request(request).await?.status().as_u16())
    };
    tokio::time::timeout(std::time::Duration::from_secs(3), ask)
        .await
        .context("no answer within 3 s")?
        .with_context(|| format!("cannot reach the admin listener at {admin}"))
}

fn config_path(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| std::env::var_os("MCPGATE_CONFIG").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("config/mcpgate.toml"))
}

/// The operational log on stderr. `RUST_LOG` wins over `[log] level`; `auto` is human
/// on a terminal and JSON otherwise (what log collectors want).
fn init_logging(settings: &config::LogSettings) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(settings.level.as_deref().unwrap_or("info"))
    });
    let terminal = std::io::stderr().is_terminal();
    let json = match settings.format {
        config::LogFormat::Json => true,
        config::LogFormat::Combined => {
            mcpgate::observe::combined::use_combined();
            true
        }
        config::LogFormat::Pretty => false,
        config::LogFormat::Auto => !terminal,
    };
    if json {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        tracing_subscriber::registry()
            .with(filter)
            .with(mcpgate::observe::log::JsonLayer::installed(
                mcpgate::observe::log::Stderr::new(),
            ))
            .init();
    } else {
        mcpgate::observe::log::use_spans();
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(terminal)
            .init();
    }
}

/// The control thread's runtime: signals, reloads, the admin listener and accepting.
/// Connections are served on the worker threads (`mcpgate::runtime::workers`).
fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return ctrl_c.await.unwrap_or(()),
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
