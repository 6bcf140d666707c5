//! A client signed in through the local demo sign-in, shared by the test binaries that run
//! the real server.

/// A cookie-keeping client signed in as `user` on the server at `base`. A request the
/// server never answers fails after 60 s with its URL, not at CI's limit.
pub async fn sign_in(base: &str, user: &str) -> reqwest::Client {
    let http = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap();
    let res = http
        .post(format!("{base}/auth/dev/login"))
        .form(&[("user", user)])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 303, "sign-in as {user}");
    http
}
