//! The site's own files in each page's head: the stylesheet, the JS glue and the wasm, under
//! the names the build gave them.

use leptos::prelude::*;

/// The names of the site's files under `/pkg`, without their extensions: `gantry.<hash>` when
/// cargo-leptos hashed them (`hash-files`; the hashes are in its `hash.txt`), else `gantry`.
///
/// The server reads them once, when it starts, and gives them to every page. Leptos's own
/// `HashedStylesheet` and `HydrationScripts` read `hash.txt` again on every page, each with a
/// `current_exe`, a `stat` and a read: about 30 µs a page on these machines, in every
/// production build. [`Stylesheet`] and [`Scripts`] write the same tags (a server test
/// compares them with Leptos's) from the names read once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteFiles {
    pub css: String,
    pub js: String,
    pub wasm: String,
}

impl SiteFiles {
    /// The names for `options`, from its hash file when it has one, as Leptos finds it: the
    /// file's path joined to the directory of the running binary.
    pub fn read(options: &LeptosOptions) -> SiteFiles {
        let hashes = options
            .hash_files
            .then(|| {
                let dir = std::env::current_exe()
                    .ok()
                    .and_then(|exe| exe.parent().map(|d| d.to_path_buf()))
                    .unwrap_or_default();
                std::fs::read_to_string(dir.join(options.hash_file.as_ref())).ok()
            })
            .flatten();
        SiteFiles::new(options, hashes.as_deref())
    }

    /// The names for `options` and the text of its hash file (`css: <hash>` lines and so on).
    pub fn new(options: &LeptosOptions, hashes: Option<&str>) -> SiteFiles {
        let name = options.output_name.to_string();
        let mut files = SiteFiles {
            css: name.clone(),
            js: name.clone(),
            wasm: name,
        };
        // What Leptos names the wasm when the build did not pass the site's name in.
        if !options.hash_files && option_env!("LEPTOS_OUTPUT_NAME").is_none() {
            files.wasm.push_str("_bg");
        }
        for line in hashes.unwrap_or_default().lines() {
            let Some((file, hash)) = line.trim().split_once(':') else {
                continue;
            };
            let name = match file {
                "css" => &mut files.css,
                "js" => &mut files.js,
                "wasm" => &mut files.wasm,
                _ => continue,
            };
            name.push('.');
            name.push_str(hash.trim());
        }
        files
    }
}

/// The names the server gave this page, or read now (a shell rendered outside a server).
fn site_files(options: &LeptosOptions) -> SiteFiles {
    use_context::<SiteFiles>().unwrap_or_else(|| SiteFiles::read(options))
}

/// The stylesheet, as Leptos's `HashedStylesheet` with `id="leptos"` writes it.
#[component]
pub fn Stylesheet(options: LeptosOptions) -> impl IntoView {
    let css = site_files(&options).css;
    view! { <link id="leptos" rel="stylesheet" href=format!("/{}/{css}.css", options.site_pkg_dir)/> }
}

/// Leptos's own start-up script, `hydration_script.js` of leptos 0.8.23 (MIT), unchanged: it
/// loads the JS glue and the wasm, then hydrates the page.
const HYDRATION_SCRIPT: &str = include_str!("hydration_script.js");

/// The scripts that load the wasm and hydrate the page, as Leptos's `HydrationScripts` writes
/// them with the response's nonce: at the site's root, not deferred, not in islands mode and
/// without a split wasm (Gantry uses none of these; `HydrationScripts` handles them).
#[component]
pub fn Scripts(options: LeptosOptions) -> impl IntoView {
    let SiteFiles { js, wasm, .. } = site_files(&options);
    let pkg = options.site_pkg_dir;
    let nonce = leptos::nonce::use_nonce();
    view! {
        <link rel="modulepreload" href=format!("/{pkg}/{js}.js") crossorigin=nonce.clone()/>
        <link
            rel="preload"
            href=format!("/{pkg}/{wasm}.wasm")
            r#as="fetch"
            r#type="application/wasm"
            crossorigin=nonce.as_ref().map(|n| n.to_string()).unwrap_or_default()
        />
        <script type="module" nonce=nonce>
            {format!("{HYDRATION_SCRIPT}(\"\", {pkg:?}, {js:?}, {wasm:?}, false);")}
        </script>
    }
}
