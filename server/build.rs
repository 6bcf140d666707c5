// `sqlx::migrate!` embeds `migrations/` at compile time, and Cargo does not know it reads
// that folder: without this, a new migration is left out of an incremental build.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
