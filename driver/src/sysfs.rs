//! Cards in sysfs: `<root>/<bdf>/{vendor,device,class,resource0}` for each PCI function, and the XDMA
//! driver's character devices, which it registers under the function as `<root>/<bdf>/xdma/<name>/uevent`
//! (`DEVNAME=<name>`, the node under `/dev`).

use crate::error::DriverError;
use opu_hw::pci;
use std::path::{Path, PathBuf};

/// Where PCI functions are listed unless told otherwise.
pub const DEFAULT_ROOT: &str = "/sys/bus/pci/devices";
/// The environment variable that moves the sysfs root (an emulated card's tree, `opu emulate`).
pub const ROOT_ENV: &str = "OPU_SYSFS_ROOT";
/// Where device nodes are; a `DEVNAME` that is an absolute path stands for itself (the emulated card's
/// device-memory file).
pub const DEV_DIR: &str = "/dev";

/// The sysfs root: `flag` (`--sysfs-root`), else `OPU_SYSFS_ROOT`, else [`DEFAULT_ROOT`].
pub fn root(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| std::env::var_os(ROOT_ENV).filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_ROOT))
}

/// A PCI function with an OPU card's vendor and device id.
#[derive(Clone, Debug)]
pub struct PciFunction {
    /// Bus address, `domain:bus:device.function` (e.g. `0000:0e:00.0`).
    pub bdf: String,
    pub dir: PathBuf,
    pub class: u32,
}

impl PciFunction {
    /// The BAR 0 file.
    pub fn resource0(&self) -> PathBuf {
        self.dir.join("resource0")
    }
    /// The emulator's description of itself, where an emulated card has one ([`crate::emulate`]).
    pub fn emulator_info(&self) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(self.dir.join(crate::emulate::INFO_FILE)).ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// Reads a sysfs attribute holding one hexadecimal number (`0x10ee\n`).
pub fn read_hex(path: &Path) -> Result<u64, DriverError> {
    let text = std::fs::read_to_string(path).map_err(|e| DriverError::file(path, e))?;
    let t = text.trim();
    u64::from_str_radix(t.trim_start_matches("0x"), 16)
        .map_err(|_| DriverError::Format { path: path.into(), what: format!("`{t}` is not a hexadecimal number") })
}

/// Whether `name` is a PCI bus address.
fn is_bdf(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.' && name.chars().filter(|c| c.is_ascii_hexdigit()).count() == 9
}

/// Every OPU card under `root`, in bus order. A function whose attributes cannot be read is skipped
/// (sysfs lists functions this user may not read); a missing root is an error.
pub fn scan(root: &Path) -> Result<Vec<PciFunction>, DriverError> {
    let entries = std::fs::read_dir(root).map_err(|e| DriverError::file(root, e))?;
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_bdf(&name) {
            continue;
        }
        let dir = entry.path();
        let (Ok(vendor), Ok(device)) = (read_hex(&dir.join("vendor")), read_hex(&dir.join("device"))) else { continue };
        if vendor == u64::from(pci::VENDOR_ID) && device == u64::from(pci::DEVICE_ID) {
            let class = read_hex(&dir.join("class")).unwrap_or(0) as u32;
            found.push(PciFunction { bdf: name, dir, class });
        }
    }
    found.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    Ok(found)
}

/// The card at `bdf`, or the first card, under `root`.
pub fn find(root: &Path, bdf: Option<&str>) -> Result<PciFunction, DriverError> {
    let cards = scan(root)?;
    match bdf {
        Some(b) => cards.into_iter().find(|c| c.bdf == b).ok_or_else(|| DriverError::NoSuchDevice { root: root.into(), bdf: b.into() }),
        None => cards.into_iter().next().ok_or(DriverError::NoCard { root: root.into(), vendor: pci::VENDOR_ID, device: pci::DEVICE_ID }),
    }
}

/// The XDMA character devices of a card: device nodes by their role.
#[derive(Clone, Debug, Default)]
pub struct XdmaNodes {
    /// Host-to-card DMA channels, by channel number.
    pub h2c: Vec<PathBuf>,
    /// Card-to-host DMA channels.
    pub c2h: Vec<PathBuf>,
    /// User interrupt 0's events device, where present.
    pub events: Option<PathBuf>,
    /// BAR 0 through the XDMA driver (`xdmaN_user`, which maps like `resource0`), where present.
    pub user: Option<PathBuf>,
}

/// The XDMA nodes the driver registered under `f` (`<dir>/xdma/xdmaN_h2c_K`...), resolved to device nodes.
pub fn xdma_nodes(f: &PciFunction) -> Result<XdmaNodes, DriverError> {
    let dir = f.dir.join("xdma");
    let none = || DriverError::NoXdma { bdf: f.bdf.clone(), dir: dir.clone() };
    let entries = std::fs::read_dir(&dir).map_err(|_| none())?;
    let mut h2c = Vec::new();
    let mut c2h = Vec::new();
    let mut events = None;
    let mut user = None;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // `xdma<N>_<role>` with role h2c_K, c2h_K, events_K, user, control...
        let Some((_, role)) = name.split_once('_') else { continue };
        let node = || -> Result<PathBuf, DriverError> {
            let uevent = entry.path().join("uevent");
            let text = std::fs::read_to_string(&uevent).map_err(|e| DriverError::file(&uevent, e))?;
            let devname = text
                .lines()
                .find_map(|l| l.strip_prefix("DEVNAME="))
                .ok_or_else(|| DriverError::Format { path: uevent.clone(), what: "no DEVNAME= line".into() })?;
            Ok(Path::new(DEV_DIR).join(devname))
        };
        let channel = |prefix: &str| role.strip_prefix(prefix).and_then(|k| k.parse::<usize>().ok());
        if let Some(k) = channel("h2c_") {
            h2c.push((k, node()?));
        } else if let Some(k) = channel("c2h_") {
            c2h.push((k, node()?));
        } else if channel("events_") == Some(0) {
            events = Some(node()?);
        } else if role == "user" {
            user = Some(node()?);
        }
    }
    h2c.sort();
    c2h.sort();
    if h2c.is_empty() || c2h.is_empty() {
        return Err(none());
    }
    Ok(XdmaNodes { h2c: h2c.into_iter().map(|c| c.1).collect(), c2h: c2h.into_iter().map(|c| c.1).collect(), events, user })
}

#[cfg(test)]
mod tests {
    #[test]
    fn bus_addresses() {
        assert!(super::is_bdf("0000:0e:00.0"));
        assert!(super::is_bdf("10de:ff:1f.7"));
        assert!(!super::is_bdf("0000:0e:00"));
        assert!(!super::is_bdf("pci0000:00"));
        assert!(!super::is_bdf("0000:0g:00.0"));
    }
}
