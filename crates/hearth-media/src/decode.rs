//! Image bytes to RGB pixels: PNG, JPEG, WebP, GIF (its first frame) and BMP, identified by their signature,
//! refused by pixel count from the header before anything is decoded (a decompression bomb never allocates), and
//! transparency composited onto white with PIL's integer arithmetic, as transformers' `convert_to_rgb` does.

use crate::MediaError;
use image::{ImageFormat, ImageReader};
use std::io::Cursor;

/// An image as 8-bit RGB, row-major, `width * height * 3` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RgbImage {
    pub width: u32,
    pub height: u32,
    pub data: Vec<u8>,
}

/// The formats decoded, by name for messages.
const FORMATS: [(ImageFormat, &str); 5] = [
    (ImageFormat::Png, "PNG"),
    (ImageFormat::Jpeg, "JPEG"),
    (ImageFormat::WebP, "WebP"),
    (ImageFormat::Gif, "GIF"),
    (ImageFormat::Bmp, "BMP"),
];

/// Decode `bytes` to RGB, refusing images over `max_pixels`.
pub fn decode(bytes: &[u8], max_pixels: u64) -> Result<RgbImage, MediaError> {
    let format = image::guess_format(bytes).ok();
    let Some((format, name)) = format.and_then(|f| FORMATS.iter().find(|(g, _)| *g == f)).copied() else {
        let what = format.map_or("not an image format hearth recognizes".to_string(), |f| format!("{f:?}"));
        return Err(MediaError::Unsupported(format!("the image is {what}: send PNG, JPEG, WebP, GIF or BMP")));
    };
    let bad = |e: image::ImageError| MediaError::Decode(format!("the {name} image cannot be decoded: {e}"));
    let (w, h) = ImageReader::with_format(Cursor::new(bytes), format).into_dimensions().map_err(bad)?;
    let pixels = w as u64 * h as u64;
    if pixels > max_pixels {
        return Err(MediaError::TooManyPixels(format!(
            "the image is {w}x{h} ({pixels} pixels), more than the limit of {max_pixels}"
        )));
    }
    if pixels == 0 {
        return Err(MediaError::Decode(format!("the {name} image is empty ({w}x{h})")));
    }
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(w);
    limits.max_image_height = Some(h);
    // The decoder's own buffers: up to 16-bit RGBA of the stated size, and some slack.
    limits.max_alloc = Some(pixels * 8 + (16 << 20));
    reader.limits(limits);
    let img = reader.decode().map_err(bad)?;
    let data =
        if img.color().has_alpha() { composite_on_white(&img.to_rgba8().into_raw()) } else { img.to_rgb8().into_raw() };
    Ok(RgbImage { width: img.width(), height: img.height(), data })
}

/// RGBA over an opaque white background, as PIL's `alpha_composite` computes it (7 extra bits of precision,
/// divisions by 255 rounded with its shifts), alpha dropped.
fn composite_on_white(rgba: &[u8]) -> Vec<u8> {
    const PRECISION_BITS: u32 = 7;
    let div255 = |a: u32| ((a >> 8) + a) >> 8;
    let mut out = Vec::with_capacity(rgba.len() / 4 * 3);
    for px in rgba.chunks_exact(4) {
        let sa = px[3] as u32;
        // dst alpha 255: blend = 255 * (255 - sa), outa255 = sa * 255 + blend = 255 * 255.
        let outa255 = sa * 255 + 255 * (255 - sa);
        let coef1 = sa * 255 * 255 * (1 << PRECISION_BITS) / outa255;
        let coef2 = 255 * (1 << PRECISION_BITS) - coef1;
        for &c in &px[..3] {
            let t = c as u32 * coef1 + 255 * coef2;
            out.push((div255(t + (0x80 << PRECISION_BITS)) >> PRECISION_BITS) as u8);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(img: image::DynamicImage, format: ImageFormat) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, format).unwrap();
        out.into_inner()
    }

    fn gradient(w: u32, h: u32) -> image::RgbImage {
        image::RgbImage::from_fn(w, h, |x, y| image::Rgb([(x * 7) as u8, (y * 5) as u8, ((x + y) * 3) as u8]))
    }

    #[test]
    fn lossless_formats_round_trip_and_alpha_meets_white() {
        let rgb = gradient(13, 9);
        for f in [ImageFormat::Png, ImageFormat::Bmp] {
            let got = decode(&encode(rgb.clone().into(), f), 1 << 20).unwrap();
            assert_eq!((got.width, got.height, got.data.as_slice()), (13, 9, rgb.as_raw().as_slice()), "{f:?}");
        }
        let jpeg = decode(&encode(rgb.clone().into(), ImageFormat::Jpeg), 1 << 20).unwrap();
        assert_eq!((jpeg.width, jpeg.height, jpeg.data.len()), (13, 9, 13 * 9 * 3));
        // Fully transparent is white, opaque is itself, half is between (Pillow 13 gives 177 for this pixel).
        let rgba = image::RgbaImage::from_raw(3, 1, vec![10, 20, 30, 0, 10, 20, 30, 255, 100, 100, 100, 128]).unwrap();
        let got = decode(&encode(rgba.into(), ImageFormat::Png), 1 << 20).unwrap();
        assert_eq!(got.data, vec![255, 255, 255, 10, 20, 30, 177, 177, 177]);
    }

    #[test]
    fn bad_images_are_refused_with_their_reason() {
        let png = encode(gradient(40, 40).into(), ImageFormat::Png);
        assert!(matches!(decode(&png, 1599), Err(MediaError::TooManyPixels(_))));
        let e = decode(&png[..png.len() / 2], 1 << 20).unwrap_err();
        assert!(matches!(e, MediaError::Decode(_)), "{e}");
        let e = decode(b"GIF89a\x02\x00\x02\x00\x00\x00\x00", 1 << 20).unwrap_err();
        assert!(matches!(e, MediaError::Decode(_)), "{e}");
        let e = decode(b"hello, world", 1 << 20).unwrap_err().to_string();
        assert!(e.contains("send PNG, JPEG, WebP, GIF or BMP"), "{e}");
        let tiff = b"II*\0\x08\0\0\0";
        assert!(decode(tiff, 1 << 20).unwrap_err().to_string().contains("Tiff"));
    }

    /// PNG's chunk CRC (CRC-32, reflected, polynomial 0xEDB88320).
    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            }
        }
        !c
    }

    #[test]
    fn a_bomb_is_refused_from_its_header() {
        // A PNG header claiming 100000 x 100000 pixels: refused before any pixel buffer exists.
        let mut png = encode(gradient(1, 1).into(), ImageFormat::Png);
        png[16..20].copy_from_slice(&100_000u32.to_be_bytes());
        png[20..24].copy_from_slice(&100_000u32.to_be_bytes());
        let crc = crc32(&png[12..29]);
        png[29..33].copy_from_slice(&crc.to_be_bytes());
        let e = decode(&png, 50_000_000).unwrap_err().to_string();
        assert!(e.contains("100000x100000"), "{e}");
    }
}
