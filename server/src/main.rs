//! `gantry`: starts the portal with the configuration from defaults, `gantry.toml` (or
//! `GANTRY_CONFIG`) and `GANTRY__…` environment overrides.

use tracing_subscriber::EnvFilter;

/// jemalloc (see server/Cargo.toml): a page render makes many small allocations,
/// which glibc's malloc served markedly slower.
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_sessions=warn")),
        )
        .init();
    let config = match gantry::config::Config::load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gantry: {e}");
            std::process::exit(2);
        }
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.is_empty() {
        return command(config, &args).await;
    }
    let mut running = gantry::startup::start(config, gantry::startup::leptos_options()).await?;
    running.warm_assets();
    println!("Gantry is up: http://{}", running.addr);
    shutdown_signal().await;
    tracing::info!("shutting down");
    running.stop().await;
    Ok(())
}

/// `gantry kube render …`; anything else is a usage error.
async fn command(config: gantry::config::Config, args: &[String]) -> anyhow::Result<()> {
    use gantry::render::{render, RenderArgs, USAGE};
    let usage = || -> ! {
        eprintln!("{USAGE}\n(with no arguments, gantry starts the portal)");
        std::process::exit(2);
    };
    if args.len() < 2 || args[0] != "kube" || args[1] != "render" {
        usage();
    }
    let render_args = match RenderArgs::parse(&args[2..]) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gantry: {e}");
            std::process::exit(2);
        }
    };
    let url = secrecy::ExposeSecret::expose_secret(&config.database.url).to_string();
    let db = gantry::db::Db::connect(&url, 1).await?;
    if config.demo.seed {
        gantry::seed::seed_catalog(&db, chrono::Utc::now()).await?;
    }
    match render(&config, &db, &render_args).await {
        Ok(yaml) => {
            print!("{yaml}");
            Ok(())
        }
        Err(e) => {
            eprintln!("gantry: {e}");
            std::process::exit(2);
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
