//! `gantry`: starts the portal with the configuration from defaults, `gantry.toml` (or
//! `GANTRY_CONFIG`) and `GANTRY__…` environment overrides.

use tracing_subscriber::EnvFilter;

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
    let running = gantry::startup::start(config, gantry::startup::leptos_options()).await?;
    println!("Gantry is up: http://{}", running.addr);
    shutdown_signal().await;
    tracing::info!("shutting down");
    running.stop().await;
    Ok(())
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
