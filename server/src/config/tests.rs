//! Configuration: defaults, environment overrides and every refusal with its key.

use super::*;

fn with(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let mut fig = Figment::from(Serialized::defaults(Config::default()));
    for (k, v) in pairs {
        // parsed as the environment provider parses values ("false" is a bool)
        let value: figment::value::Value = v.parse().expect("any string parses");
        fig = fig.merge((*k, value));
    }
    Config::from_figment(fig)
}

#[test]
fn defaults_run_out_of_the_box() {
    let c = with(&[]).unwrap();
    assert_eq!(c.server.addr.port(), 3000);
    assert_eq!(c.sim.clock, ClockMode::Scaled);
    assert!(c.is_sqlite());
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail decides the error type
fn environment_overrides_use_double_underscores() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("GANTRY__SERVER__ADDR", "127.0.0.1:4000");
        jail.set_env("GANTRY__SIM__CLOCK", "manual");
        jail.set_env("GANTRY__SIM__TIME_SCALE", "120");
        jail.set_env(
            "GANTRY__DATABASE__URL",
            "postgres://postgres@127.0.0.1/gantry",
        );
        let c = Config::load().map_err(|e| e.to_string())?;
        assert_eq!(c.server.addr.port(), 4000);
        assert_eq!(c.sim.clock, ClockMode::Manual);
        assert_eq!(c.sim.time_scale, 120.0);
        assert!(!c.is_sqlite());
        Ok(())
    });
}

#[test]
fn invalid_values_name_the_key() {
    let e = with(&[("sim.clock", "sometimes")]).unwrap_err().to_string();
    assert!(e.contains("sim.clock"), "{e}");
    let e = with(&[("sim.time_scale", "-1")]).unwrap_err().to_string();
    assert!(e.contains("sim.time_scale"), "{e}");
    let e = with(&[("server.addr", "nowhere")]).unwrap_err().to_string();
    assert!(e.contains("server.addr"), "{e}");
    let e = with(&[("database.url", "mysql://x")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("database.url"), "{e}");
}

#[test]
#[allow(clippy::result_large_err)] // figment's Jail decides the error type
fn trusted_proxies_and_timeouts_are_checked() {
    assert!(
        with(&[]).unwrap().server.trusted_proxies.is_empty(),
        "nobody by default"
    );
    let e = with(&[("server.header_read_timeout_s", "0")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("server.header_read_timeout_s"), "{e}");
    let e = with(&[("server.max_streams_per_user", "0")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("server.max_streams_per_user"), "{e}");
    let e = with(&[("server.page_cache_ms", "60000")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("server.page_cache_ms"), "{e}");
    assert_eq!(with(&[]).unwrap().server.page_cache_ms, 1000);
    figment::Jail::expect_with(|jail| {
        jail.set_env(
            "GANTRY__SERVER__TRUSTED_PROXIES",
            "[10.0.0.0/8, \"::1\", 192.168.1.7]",
        );
        let c = Config::load().map_err(|e| e.to_string())?;
        let nets = c.server.trusted_proxy_nets();
        assert_eq!(nets.len(), 3);
        assert!(nets[0].contains(&"10.1.2.3".parse::<std::net::IpAddr>().unwrap()));
        assert!(nets[1].contains(&"::1".parse::<std::net::IpAddr>().unwrap()));
        assert!(nets[2].contains(&"192.168.1.7".parse::<std::net::IpAddr>().unwrap()));
        assert!(!nets[2].contains(&"192.168.1.8".parse::<std::net::IpAddr>().unwrap()));
        jail.set_env("GANTRY__SERVER__TRUSTED_PROXIES", "[10.0.0.0/33]");
        let e = Config::load().unwrap_err().to_string();
        assert!(e.contains("server.trusted_proxies"), "{e}");
        Ok(())
    });
}

#[test]
fn dev_login_refuses_a_public_address() {
    let e = with(&[("server.addr", "0.0.0.0:3000")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("auth.dev_login"), "{e}");
    assert!(with(&[("server.addr", "0.0.0.0:3000"), ("auth.dev_login", "false")]).is_ok());
}

fn oidc(extra: &[(&'static str, &'static str)]) -> Result<Config, ConfigError> {
    let mut pairs = vec![
        ("auth.oidc.issuer", "http://127.0.0.1:4000"),
        ("auth.oidc.client_id", "gantry"),
        ("auth.oidc.client_secret", "s3cr3t-value"),
        (
            "auth.oidc.redirect_url",
            "http://127.0.0.1:3000/auth/callback",
        ),
    ];
    pairs.extend_from_slice(extra);
    with(&pairs)
}

#[test]
fn oidc_settings_are_checked_and_turn_local_sign_in_off() {
    let c = oidc(&[]).unwrap();
    assert!(!c.auth.dev_login(), "OIDC turns the demo sign-in off");
    assert!(with(&[]).unwrap().auth.dev_login());
    let e = oidc(&[("auth.dev_login", "true")]).unwrap_err().to_string();
    assert!(
        e.contains("auth.dev_login") && e.contains("together"),
        "{e}"
    );
    let e = oidc(&[("auth.oidc.issuer", "http://idp.example.com")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("auth.oidc.issuer") && e.contains("https"), "{e}");
    assert!(oidc(&[("auth.oidc.issuer", "https://idp.example.com/realms/ml")]).is_ok());
    let e = oidc(&[("auth.oidc.groups.ml-nlp", "nlp:owner")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("auth.oidc.groups") && e.contains("nlp:owner"),
        "{e}"
    );
    let c = oidc(&[
        ("auth.oidc.groups.ml-nlp", "nlp:member"),
        ("auth.oidc.groups.ml-admins", "admin"),
    ])
    .unwrap();
    assert_eq!(c.auth.oidc.unwrap().groups.len(), 2);
    assert_eq!(
        oidc(&[]).unwrap().auth.oidc.unwrap().pending_per_address,
        100
    );
    assert_eq!(oidc(&[]).unwrap().auth.oidc.unwrap().token_sign_in_days, 30);
    let e = oidc(&[("auth.oidc.token_sign_in_days", "5000")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("auth.oidc.token_sign_in_days"), "{e}");
    let e = oidc(&[("auth.oidc.pending_per_address", "0")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("auth.oidc.pending_per_address") && e.contains("1 to 100000"),
        "{e}"
    );
    let e = with(&[("auth.oidc.issuer", "https://idp.example.com")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("client_id"), "a missing key is named: {e}");
    // https redirect → Secure cookies without being asked.
    let c = oidc(&[
        (
            "auth.oidc.redirect_url",
            "https://gantry.example.com/auth/callback",
        ),
        ("server.addr", "0.0.0.0:3000"),
    ])
    .unwrap();
    assert!(c.auth.secure());
    assert_eq!(
        c.auth.oidc.unwrap().post_logout_url(),
        "https://gantry.example.com/login"
    );
}

#[test]
fn the_accounting_time_zone_is_an_iana_name() {
    assert_eq!(with(&[]).unwrap().usage.tz(), chrono_tz::Tz::UTC);
    let c = with(&[("usage.time_zone", "Europe/Berlin")]).unwrap();
    assert_eq!(c.usage.tz(), chrono_tz::Europe::Berlin);
    let e = with(&[("usage.time_zone", "CET+1")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("usage.time_zone"), "{e}");
}

#[test]
fn group_grants_parse() {
    assert_eq!(GroupGrant::parse("admin"), Some(GroupGrant::Admin));
    assert_eq!(
        GroupGrant::parse("nlp:lead"),
        Some(GroupGrant::Team {
            team: "nlp".into(),
            lead: true
        })
    );
    for bad in ["", "nlp", "nlp:", ":member", "NLP:member", "nlp:admin"] {
        assert_eq!(GroupGrant::parse(bad), None, "{bad}");
    }
}

#[test]
fn the_client_secret_stays_out_of_debug() {
    let c = oidc(&[]).unwrap();
    let shown = format!("{c:?}");
    assert!(!shown.contains("s3cr3t-value"), "{shown}");
}

#[test]
fn database_passwords_stay_out_of_debug() {
    let c = with(&[("database.url", "postgres://gantry:hunter2@db/gantry")]).unwrap();
    let shown = format!("{c:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("gantry:***@db"), "{shown}");
}

#[test]
fn a_password_given_as_a_query_parameter_stays_out_of_debug_and_logs() {
    let url = "postgres://gantry@db/gantry?sslmode=require&password=hunter2&PassWord=Sup3rS3cret&application_name=gantry";
    let c = with(&[("database.url", url)]).unwrap();
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("hunter2") && !shown.contains("Sup3rS3cret"),
        "{shown}"
    );
    assert_eq!(
        redact_url(url),
        "postgres://gantry@db/gantry?sslmode=require&password=***&PassWord=***&application_name=gantry"
    );
    assert_eq!(
        redact_url("postgres://u:pw@h:5432/db?sslpassword=k"),
        "postgres://u:***@h:5432/db?sslpassword=***"
    );
    for plain in [
        "sqlite://gantry.db?mode=rwc",
        "http://prometheus:9090",
        "sqlite::memory:",
    ] {
        assert_eq!(redact_url(plain), plain);
    }
}
