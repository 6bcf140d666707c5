//! The configuration the HTTP tests start Gantry with: port 0, the given database, the sim
//! clock moved by hand, no demo jobs or history.
use gantry::config::{ClockMode, Config};

pub fn test_config(url: &str) -> Config {
    let mut c = Config::default();
    c.server.addr = "127.0.0.1:0".parse().unwrap();
    c.database.url = url.to_string().into();
    c.sim.clock = ClockMode::Manual;
    c.demo.jobs = false;
    c.demo.history = false;
    // The tests' webhook receivers listen on this machine.
    c.server.webhook_networks = vec!["127.0.0.0/8".into()];
    c
}
