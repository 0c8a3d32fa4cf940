//! Build data for `tsdb version`: the git revision (`git rev-parse --short HEAD`, or
//! `HOURGLASS_GIT_REV` when set, or `unknown`) and the build time (`SOURCE_DATE_EPOCH` when
//! set), as OpenTSDB's build stamps them. Runs again when HEAD moves.

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// `yyyy/MM/dd HH:mm:ss +0000` of Unix seconds, as OpenTSDB's build stamps its date.
fn utc(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0).map_or_else(
        || "unknown".into(),
        |t| t.format("%Y/%m/%d %H:%M:%S +0000").to_string(),
    )
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=HOURGLASS_GIT_REV");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    // Run again when HEAD moves: HEAD itself, the branch it names, and packed refs.
    for path in ["HEAD", "packed-refs"]
        .into_iter()
        .map(String::from)
        .chain(git(&dir, &["symbolic-ref", "-q", "HEAD"]))
    {
        if let Some(p) = git(
            &dir,
            &["rev-parse", "--path-format=absolute", "--git-path", &path],
        ) && Path::new(&p).exists()
        {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    let rev = std::env::var("HOURGLASS_GIT_REV")
        .ok()
        .filter(|r| !r.is_empty())
        .or_else(|| git(&dir, &["rev-parse", "--short", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    let now = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    println!("cargo:rustc-env=HOURGLASS_GIT_REV={rev}");
    println!("cargo:rustc-env=HOURGLASS_BUILD_DATE={}", utc(now));
    println!("cargo:rustc-env=HOURGLASS_BUILD_TIMESTAMP={now}");
}
