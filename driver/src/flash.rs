//! Programming a card with a card image (`opu flash`): the bitstream checked (a whole Xilinx `.bit`, or an
//! `.xclbin` for XRT), its sidecar checked against it, the vendor tool's command planned (and only printed
//! with `--dry-run`), run, and the card's ID and CONFIG_HASH compared with the sidecar afterwards.
//!
//! Methods:
//! - `xrt`: `xrt-smi program --device BDF --user IMAGE.xclbin` (Alveo cards under XRT; an `.xclbin` only).
//! - `openfpgaloader`: the card is removed from the PCI bus (`<sysfs>/<bdf>/remove`), the `.bit` is loaded
//!   over JTAG (`openFPGALoader --cable CABLE [--ftdi-serial S] IMAGE.bit`) and the bus is rescanned
//!   (`<sysfs>/../rescan`), so that the new image enumerates.
//! - `emulated`: an emulated card (`opu emulate`) loads the sidecar's overlay.

use crate::error::DriverError;
use crate::sysfs::{self, PciFunction};
use opu_hw::image::Sidecar;
use opu_hw::regs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What kind of card image a file is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// A Xilinx bitstream with its header: the design name (`top;UserID=...;Version=...`), the part, and the
    /// bytes of configuration data.
    Bit { design: String, part: String, data_bytes: u64 },
    /// An XRT container (`xclbin2`).
    Xclbin { bytes: u64 },
}

/// A card image read and checked whole.
#[derive(Clone, Debug)]
pub struct Image {
    pub path: PathBuf,
    pub kind: ImageKind,
    pub sha256: String,
}

fn format_err(path: &Path, what: impl Into<String>) -> DriverError {
    DriverError::Format { path: path.into(), what: what.into() }
}

/// The Xilinx `.bit` header: a 9-byte preamble, then fields `a` (design), `b` (part), `c` (date), `d`
/// (time) with 16-bit big-endian lengths, then `e` with a 32-bit length of the configuration data, which
/// starts with the sync word 0xAA995566 after its padding.
fn parse_bit(path: &Path, b: &[u8]) -> Result<ImageKind, DriverError> {
    const PREAMBLE: [u8; 13] = [0x00, 0x09, 0x0F, 0xF0, 0x0F, 0xF0, 0x0F, 0xF0, 0x0F, 0xF0, 0x00, 0x00, 0x01];
    if b.len() < PREAMBLE.len() || b[..PREAMBLE.len()] != PREAMBLE {
        return Err(format_err(path, "not a Xilinx bitstream (.bit): its 13-byte header preamble is missing"));
    }
    let mut at = PREAMBLE.len();
    let text = |key: u8, at: &mut usize| -> Result<String, DriverError> {
        let short = || format_err(path, format!("truncated: the header ends inside field `{}`", key as char));
        if b.get(*at) != Some(&key) {
            return Err(format_err(path, format!("header field `{}` expected at byte {}", key as char, *at)));
        }
        let len = u16::from_be_bytes(b.get(*at + 1..*at + 3).ok_or_else(short)?.try_into().unwrap()) as usize;
        let s = b.get(*at + 3..*at + 3 + len).ok_or_else(short)?;
        *at += 3 + len;
        Ok(String::from_utf8_lossy(s).trim_end_matches('\0').to_string())
    };
    let design = text(b'a', &mut at)?;
    let part = text(b'b', &mut at)?;
    text(b'c', &mut at)?;
    text(b'd', &mut at)?;
    if b.get(at) != Some(&b'e') || b.len() < at + 5 {
        return Err(format_err(path, "truncated: no configuration data field (`e`) after the header"));
    }
    let data_bytes = u64::from(u32::from_be_bytes(b[at + 1..at + 5].try_into().unwrap()));
    let data = &b[at + 5..];
    if (data.len() as u64) < data_bytes {
        return Err(format_err(path, format!("truncated: the header promises {data_bytes} bytes of configuration data, the file holds {}", data.len())));
    }
    let head = &data[..data.len().min(1024)];
    if !head.windows(4).any(|w| w == [0xAA, 0x99, 0x55, 0x66]) {
        return Err(format_err(path, "no sync word (0xAA995566) at the start of the configuration data"));
    }
    Ok(ImageKind::Bit { design, part, data_bytes })
}

/// The `xclbin2` header: magic, then its total length at byte 304 (`axlf_header.m_length`).
fn parse_xclbin(path: &Path, b: &[u8]) -> Result<ImageKind, DriverError> {
    const LENGTH_AT: usize = 8 + 4 + 28 + 256 + 8;
    let len = b.get(LENGTH_AT..LENGTH_AT + 8).ok_or_else(|| format_err(path, format!("truncated: {} bytes, shorter than the xclbin header", b.len())))?;
    let total = u64::from_le_bytes(len.try_into().unwrap());
    if (b.len() as u64) < total {
        return Err(format_err(path, format!("truncated: the xclbin header says {total} bytes, the file holds {}", b.len())));
    }
    Ok(ImageKind::Xclbin { bytes: total })
}

impl Image {
    pub fn read(path: &Path) -> Result<Image, DriverError> {
        use sha2::Digest;
        let b = std::fs::read(path).map_err(|e| DriverError::file(path, e))?;
        let kind = if b.starts_with(b"xclbin2\0") { parse_xclbin(path, &b)? } else { parse_bit(path, &b)? };
        let sha256 = sha2::Sha256::digest(&b).iter().map(|x| format!("{x:02x}")).collect();
        Ok(Image { path: path.into(), kind, sha256 })
    }

    /// The sidecar beside the image: `--sidecar`, else `NAME.opu.json`, else `opu-overlay.json` in its folder
    /// or the folder above (a project's `build/` holds the bitstream).
    pub fn find_sidecar(&self) -> Result<PathBuf, DriverError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let stem = self.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let candidates = [dir.join(format!("{stem}.opu.json")), dir.join("opu-overlay.json"), dir.join("../opu-overlay.json")];
        candidates
            .iter()
            .find(|p| p.exists())
            .cloned()
            .ok_or_else(|| format_err(&self.path, format!("no sidecar: looked for {}; name one with --sidecar", candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))))
    }

    /// The sidecar must describe this image: a `.bit`'s design is the sidecar's top module.
    pub fn check_sidecar(&self, sidecar: &Sidecar, sidecar_path: &Path) -> Result<(), DriverError> {
        if let ImageKind::Bit { design, .. } = &self.kind {
            let top = design.split(';').next().unwrap_or("");
            if top != sidecar.top {
                return Err(format_err(
                    sidecar_path,
                    format!("does not match {}: the bitstream is design `{top}`, the sidecar's top is `{}`", self.path.display(), sidecar.top),
                ));
            }
        }
        Ok(())
    }
}

/// How to program the card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    Xrt,
    OpenFpgaLoader { cable: String, ftdi_serial: Option<String> },
    Emulated,
}

/// One step of programming.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A command to run: program and arguments.
    Run(Vec<String>),
    /// A sysfs attribute to write `1` to.
    Write(PathBuf),
    /// Hand the sidecar to the emulated card and wait for it to take it.
    Emulate { request: PathBuf, body: String },
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Run(argv) => write!(f, "{}", argv.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ")),
            Step::Write(p) => write!(f, "echo 1 > {}", shell_quote(&p.display().to_string())),
            Step::Emulate { request, .. } => write!(f, "(emulated card) write the sidecar to {} and wait until the card takes it", request.display()),
        }
    }
}

/// `a` as one shell word.
fn shell_quote(a: &str) -> String {
    if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=+,@".contains(c)) {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

/// The steps that program `image` onto the card at `card` (its sysfs entry) by `method`.
pub fn plan(image: &Image, sidecar: &Sidecar, method: &Method, card: Option<&PciFunction>, root: &Path) -> Result<Vec<Step>, DriverError> {
    let path = image.path.display().to_string();
    match method {
        Method::Xrt => {
            if !matches!(image.kind, ImageKind::Xclbin { .. }) {
                return Err(format_err(&image.path, "--method xrt programs an .xclbin; a .bit (what `opu rtl project` builds) goes over JTAG: --method openfpgaloader"));
            }
            let card = card.ok_or_else(|| format_err(&image.path, "--method xrt needs the card: --device BDF"))?;
            Ok(vec![Step::Run(vec!["xrt-smi".into(), "program".into(), "--device".into(), card.bdf.clone(), "--user".into(), path])])
        }
        Method::OpenFpgaLoader { cable, ftdi_serial } => {
            if !matches!(image.kind, ImageKind::Bit { .. }) {
                return Err(format_err(&image.path, "--method openfpgaloader loads a .bit"));
            }
            let mut argv = vec!["openFPGALoader".to_string(), "--cable".into(), cable.clone()];
            if let Some(s) = ftdi_serial {
                argv.extend(["--ftdi-serial".into(), s.clone()]);
            }
            argv.extend(["--fpga-part".into(), sidecar.part.clone(), path]);
            let mut steps = Vec::new();
            // the link drops while the FPGA is reconfigured: off the bus first, back on after
            if let Some(c) = card {
                steps.push(Step::Write(c.dir.join("remove")));
            }
            steps.push(Step::Run(argv));
            if card.is_some() {
                steps.push(Step::Write(root.parent().unwrap_or(root).join("rescan")));
            }
            Ok(steps)
        }
        Method::Emulated => {
            let card = card.ok_or_else(|| format_err(&image.path, "--method emulated needs an emulated card (`opu emulate`)"))?;
            if card.emulator_info().is_none() {
                return Err(format_err(&card.dir, "is not an emulated card (no opu_emulator.json): use --method xrt or openfpgaloader"));
            }
            let mut body = serde_json::to_value(sidecar).expect("a sidecar serializes");
            body["bitstream_sha256"] = image.sha256.clone().into();
            Ok(vec![Step::Emulate { request: card.dir.join(crate::emulate::PROGRAM_FILE), body: body.to_string() }])
        }
    }
}

/// Runs the steps; a tool that is missing or fails is an error naming it.
pub fn run(steps: &[Step], timeout: Duration) -> Result<(), DriverError> {
    for s in steps {
        match s {
            Step::Run(argv) => {
                let out = std::process::Command::new(&argv[0]).args(&argv[1..]).output().map_err(|e| {
                    if e.kind() == std::io::ErrorKind::NotFound {
                        format_err(Path::new(&argv[0]), "not found on PATH (install it, or program the card another way: --method)")
                    } else {
                        DriverError::file(&argv[0], e)
                    }
                })?;
                if !out.status.success() {
                    return Err(format_err(Path::new(&argv[0]), format!("`{s}` failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim())));
                }
            }
            Step::Write(p) => std::fs::write(p, "1").map_err(|e| DriverError::file(p, e))?,
            Step::Emulate { request, body } => {
                let tmp = request.with_extension("tmp");
                std::fs::write(&tmp, body).map_err(|e| DriverError::file(&tmp, e))?;
                std::fs::rename(&tmp, request).map_err(|e| DriverError::file(request, e))?;
                let t = Instant::now();
                while request.exists() {
                    if t.elapsed() > timeout {
                        let _ = std::fs::remove_file(request);
                        return Err(format_err(request, format!("the emulated card did not take the image within {timeout:?} (is `opu emulate` running?)")));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let err = request.with_file_name("program.error");
                if let Ok(why) = std::fs::read_to_string(&err) {
                    return Err(format_err(request, format!("the emulated card refused the image: {why}")));
                }
            }
        }
    }
    Ok(())
}

/// After programming: the card at `bdf` under `root` must be an OPU overlay whose CONFIG_HASH is the
/// sidecar's (waits up to `timeout` for it to reappear on the bus).
pub fn verify(root: &Path, bdf: Option<&str>, sidecar: &Sidecar, timeout: Duration) -> Result<crate::card::CardInfo, DriverError> {
    let t = Instant::now();
    let f = loop {
        match sysfs::find(root, bdf) {
            Ok(f) => break f,
            Err(e) if t.elapsed() > timeout => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let info = crate::card::list(root)?.into_iter().find(|c| c.bdf == f.bdf).ok_or(DriverError::NoSuchDevice { root: root.into(), bdf: f.bdf.clone() })?;
    if info.id != regs::ID_VALUE || info.config_hash != sidecar.config_hash {
        return Err(format_err(
            &f.dir,
            format!(
                "after programming, card {} reads ID {:#010x} and CONFIG_HASH {} (overlay {}); the image's sidecar says ID {:#010x} and {} (`{}`)",
                f.bdf,
                info.id,
                info.config_hash,
                info.config.clone().unwrap_or_else(|| "unknown".into()),
                regs::ID_VALUE,
                sidecar.config_hash,
                sidecar.config.name
            ),
        ));
    }
    Ok(info)
}
