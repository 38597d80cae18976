//! Images in for the CNN path: PNG or PGM files read as grey values, and the preprocessing that turns them
//! into the model's input.
//!
//! - [`Preprocess::Fit`]: what the digit classifier's own package does before it predicts
//!   (`digitsclassifier/inference.py`, 2.1.0): binarize (ink where a dark-ink-on-light-paper pixel is at
//!   most 200), crop to the ink's bounding box, scale it to fit 24x24 keeping its aspect ratio (PIL's
//!   `ImageOps.contain`; a binary image resizes by nearest neighbour), and paste it centred on a black
//!   28x28 image, ink 255. A light-on-dark image (an MNIST digit) is inverted first, judged by its border.
//! - [`Preprocess::Resize`]: the grey values resized to the model's input by nearest neighbour.
//!
//! The model's input scaling (`pixels / 255`) comes after, in the graph (`input_scaling`).

use anyhow::{bail, Context, Result};
use std::path::Path;

/// A grey image, row by row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gray {
    pub width: usize,
    pub height: usize,
    pub pixels: Vec<u8>,
}

impl Gray {
    fn at(&self, x: usize, y: usize) -> u8 {
        self.pixels[y * self.width + x]
    }
}

/// Reads a PNG or PGM (any bit depth or colour type; colour is converted to luma).
pub fn load(path: &Path) -> Result<Gray> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let format = image::guess_format(&bytes).ok().filter(|f| matches!(f, image::ImageFormat::Png | image::ImageFormat::Pnm));
    let Some(format) = format else { bail!("{}: not a PNG or PGM image (by its first bytes)", path.display()) };
    let img = image::load_from_memory_with_format(&bytes, format).with_context(|| format!("{}: a damaged {format:?} image", path.display()))?;
    let g = img.to_luma8();
    let (width, height) = (g.width() as usize, g.height() as usize);
    if width == 0 || height == 0 {
        bail!("{}: the image is empty ({width} x {height})", path.display());
    }
    Ok(Gray { width, height, pixels: g.into_raw() })
}

/// How an image becomes the model's input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preprocess {
    /// The digit classifier's: binarize, crop, fit 24x24, centre in 28x28 (the module comment).
    Fit,
    /// Grey values resized to the input.
    Resize,
}

impl Preprocess {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "fit" => Ok(Preprocess::Fit),
            "resize" => Ok(Preprocess::Resize),
            other => bail!("--preprocess `{other}`: expected fit (the digit classifier's: binarize, crop, fit 24x24 in 28x28) or resize"),
        }
    }

    /// The model's input (`[h][w]` grey values 0-255, one channel) from `img`; `what` names the image in
    /// errors.
    pub fn apply(self, img: &Gray, h: usize, w: usize, what: &str) -> Result<Vec<u8>> {
        match self {
            Preprocess::Resize => Ok(resize_nearest(img, w, h).pixels),
            Preprocess::Fit => {
                if (h, w) != (28, 28) {
                    bail!("--preprocess fit makes 28x28 images; the model takes {h}x{w} (use --preprocess resize)");
                }
                fit_digit(img).with_context(|| what.to_string())
            }
        }
    }
}

/// The digit classifier's preprocessing (the module comment), 28x28 values 0 or 255.
pub fn fit_digit(img: &Gray) -> Result<Vec<u8>> {
    // light paper (the border's mean above the middle grey) has dark ink, as the package expects; an
    // MNIST-style light digit on black is inverted first
    let border: Vec<u8> = (0..img.width).flat_map(|x| [img.at(x, 0), img.at(x, img.height - 1)]).chain((0..img.height).flat_map(|y| [img.at(0, y), img.at(img.width - 1, y)])).collect();
    let light_paper = border.iter().map(|&v| u64::from(v)).sum::<u64>() > 127 * border.len() as u64;
    let ink = |v: u8| if light_paper { v <= 200 } else { 255 - v <= 200 };
    let (mut x0, mut y0, mut x1, mut y1) = (usize::MAX, usize::MAX, 0, 0);
    for y in 0..img.height {
        for x in 0..img.width {
            if ink(img.at(x, y)) {
                (x0, y0, x1, y1) = (x0.min(x), y0.min(y), x1.max(x + 1), y1.max(y + 1));
            }
        }
    }
    if x0 == usize::MAX {
        bail!("no ink: every pixel is background");
    }
    let (cw, ch) = (x1 - x0, y1 - y0);
    // `ImageOps.contain(cropped, (24, 24))`: the side that limits is 24, the other Python's round (half to
    // even) of the kept ratio
    let (nw, nh) = match cw.cmp(&ch) {
        std::cmp::Ordering::Greater => (24, round_half_even(ch as f64 / cw as f64 * 24.0)),
        std::cmp::Ordering::Less => (round_half_even(cw as f64 / ch as f64 * 24.0), 24),
        std::cmp::Ordering::Equal => (24, 24),
    };
    let (nw, nh) = (nw.max(1), nh.max(1));
    let mut out = vec![0u8; 28 * 28];
    let (left, top) = ((28 - nw) / 2, (28 - nh) / 2);
    let (xs, ys) = (nearest(cw, nw), nearest(ch, nh));
    for (y, &sy) in ys.iter().enumerate() {
        for (x, &sx) in xs.iter().enumerate() {
            if ink(img.at(x0 + sx, y0 + sy)) {
                out[(top + y) * 28 + left + x] = 255;
            }
        }
    }
    Ok(out)
}

/// For each of `dst` target pixels, the source pixel (of `src`) under its centre, as PIL's nearest-neighbour
/// resize computes it: the centre advances by the scale `src / dst` one pixel at a time, in f64 (summed, not
/// multiplied: the same bits as PIL where a centre falls on a pixel edge).
fn nearest(src: usize, dst: usize) -> Vec<usize> {
    let a = src as f64 / dst as f64;
    let mut at = a * 0.5;
    (0..dst)
        .map(|_| {
            let s = (at as usize).min(src - 1);
            at += a;
            s
        })
        .collect()
}

fn round_half_even(x: f64) -> usize {
    x.round_ties_even() as usize
}

/// Nearest-neighbour resize (the source pixel under each target pixel's centre, as PIL picks it).
pub fn resize_nearest(img: &Gray, w: usize, h: usize) -> Gray {
    let (xs, ys) = (nearest(img.width, w), nearest(img.height, h));
    let pixels = ys.iter().flat_map(|&sy| xs.iter().map(move |&sx| img.at(sx, sy))).collect();
    Gray { width: w, height: h, pixels }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_crops_scales_and_centres() {
        // a 10 x 4 dark bar on white paper, in a 40 x 30 image
        let mut g = Gray { width: 40, height: 30, pixels: vec![255; 1200] };
        for y in 5..9 {
            for x in 3..13 {
                g.pixels[y * 40 + x] = 0;
            }
        }
        let out = fit_digit(&g).unwrap();
        // fits 24 wide, round(4 / 10 * 24) = round(9.6) = 10 high, centred: columns 2..26, rows 9..19
        for y in 0..28 {
            for x in 0..28 {
                let want = if (2..26).contains(&x) && (9..19).contains(&y) { 255 } else { 0 };
                assert_eq!(out[y * 28 + x], want, "({x}, {y})");
            }
        }
        // the same bar light on black gives the same input
        let inv = Gray { pixels: g.pixels.iter().map(|v| 255 - v).collect(), ..g.clone() };
        assert_eq!(fit_digit(&inv).unwrap(), out);
        // blank paper has no digit
        let blank = Gray { width: 8, height: 8, pixels: vec![250; 64] };
        assert!(fit_digit(&blank).unwrap_err().to_string().contains("no ink"));
    }

    #[test]
    fn bad_images_are_refused_naming_the_file() {
        let p = std::env::temp_dir().join(format!("opu-img-{}.png", std::process::id()));
        std::fs::write(&p, b"GIF89a not an image we read").unwrap();
        let e = format!("{:#}", load(&p).unwrap_err());
        assert!(e.contains("opu-img-") && e.contains("not a PNG or PGM"), "{e}");
        // a PNG cut short
        let mut png = Vec::new();
        image::DynamicImage::ImageLuma8(image::GrayImage::from_pixel(28, 28, image::Luma([7]))).write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).unwrap();
        std::fs::write(&p, &png[..png.len() / 2]).unwrap();
        let e = format!("{:#}", load(&p).unwrap_err());
        assert!(e.contains("opu-img-") && e.contains("damaged Png image"), "{e}");
        // a PGM reads
        std::fs::write(&p, b"P2\n2 2\n255\n0 10\n20 255\n").unwrap();
        assert_eq!(load(&p).unwrap(), Gray { width: 2, height: 2, pixels: vec![0, 10, 20, 255] });
        let _ = std::fs::remove_file(&p);
    }
}
