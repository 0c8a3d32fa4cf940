//! `tsdb auth`: the credentials file (`tsd.core.authentication.users`) edited.
//!
//! - `add-user --file FILE NAME --permissions P[,P...]`: the password is read from standard
//!   input (its first line), hashed with argon2id; only the hash is written.
//! - `add-token --file FILE NAME --permissions P[,P...]`: a new random token is printed on
//!   standard output, once; only its SHA-256 is written.
//! - `remove --file FILE NAME`.
//!
//! Adding a name that exists with the same kind replaces it (a new password, a rotated token).
//! The file is written whole to a temporary file beside it (mode 0600) and renamed over it,
//! so a TSD reading it never sees half a file.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use hourglass_core::credentials::{
    Credential, CredentialKind, format_credentials, parse_credentials,
};
use hourglass_core::permission::Permissions;
use hourglass_server::auth::{hash_password, new_token, token_hash};

#[derive(Debug, clap::Args)]
pub(crate) struct AuthArgs {
    #[command(subcommand)]
    command: AuthCommand,
}

#[derive(Debug, clap::Subcommand)]
enum AuthCommand {
    /// Add a user (or set its password and permissions); the password is read from stdin.
    AddUser(AddArgs),
    /// Add an API token (or rotate it); the new token is printed on stdout.
    AddToken(AddArgs),
    /// Remove a user or token.
    Remove(RemoveArgs),
}

#[derive(Debug, clap::Args)]
struct AddArgs {
    /// The credentials file (created when missing).
    #[arg(long, value_name = "FILE")]
    file: PathBuf,
    /// The user's or token's name.
    name: String,
    /// Comma-separated: read, write, annotate, uid, delete, admin (admin implies all).
    #[arg(long, value_name = "P[,P...]")]
    permissions: String,
}

#[derive(Debug, clap::Args)]
struct RemoveArgs {
    /// The credentials file.
    #[arg(long, value_name = "FILE")]
    file: PathBuf,
    /// The user's or token's name.
    name: String,
}

pub(crate) fn run(args: &AuthArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        AuthCommand::AddUser(a) => {
            let password = read_password()?;
            let hash = hash_password(&password).map_err(anyhow::Error::msg)?;
            add(a, CredentialKind::User, hash)?;
        }
        AuthCommand::AddToken(a) => {
            let token = new_token().map_err(anyhow::Error::msg)?;
            add(a, CredentialKind::Token, token_hash(&token))?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{token}")?;
            out.flush()?;
        }
        AuthCommand::Remove(a) => {
            let mut credentials = read(&a.file)?;
            let before = credentials.len();
            credentials.retain(|c| c.name != a.name);
            if credentials.len() == before {
                anyhow::bail!(
                    "no user or token named {:?} in {}",
                    a.name,
                    a.file.display()
                );
            }
            write(&a.file, &credentials)?;
            eprintln!("removed {}", a.name);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The first line of standard input, without its line end; never empty.
fn read_password() -> anyhow::Result<String> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("cannot read the password from standard input")?;
    let password = line.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        anyhow::bail!("no password on standard input (its first line is the password)");
    }
    Ok(password.to_owned())
}

fn add(args: &AddArgs, kind: CredentialKind, secret: String) -> anyhow::Result<()> {
    let name = args.name.as_str();
    if name.is_empty() || name.contains(char::is_whitespace) || name.starts_with('#') {
        anyhow::bail!("a name has no spaces and does not start with '#': {name:?}");
    }
    let permissions = Permissions::parse_list(&args.permissions)?;
    let mut credentials = if args.file.exists() {
        read(&args.file)?
    } else {
        Vec::new()
    };
    let entry = Credential {
        kind,
        name: name.to_owned(),
        permissions,
        secret,
    };
    match credentials.iter_mut().find(|c| c.name == name) {
        Some(existing) if existing.kind != kind => {
            anyhow::bail!("{name:?} is already a {}", kind_name(existing.kind))
        }
        Some(existing) => {
            *existing = entry;
            eprintln!("updated {} {name} ({permissions})", kind_name(kind));
        }
        None => {
            credentials.push(entry);
            eprintln!("added {} {name} ({permissions})", kind_name(kind));
        }
    }
    write(&args.file, &credentials)
}

fn kind_name(kind: CredentialKind) -> &'static str {
    match kind {
        CredentialKind::User => "user",
        CredentialKind::Token => "token",
    }
}

fn read(path: &Path) -> anyhow::Result<Vec<Credential>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse_credentials(&text).with_context(|| format!("invalid credentials file {}", path.display()))
}

/// Writes the whole file beside the old one, readable by its owner only, and renames it over.
fn write(path: &Path, credentials: &[Credential]) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().context("the file has no name")?;
    let temp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .with_context(|| format!("cannot write {}", temp.display()))?;
    file.write_all(format_credentials(credentials).as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temp, path).with_context(|| format!("cannot replace {}", path.display()))?;
    // The rename is durable once the directory is synced.
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}
