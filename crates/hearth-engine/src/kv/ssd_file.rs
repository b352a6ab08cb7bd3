//! The on-disk format of the SSD KV tier ([`super::ssd`]): one file per block, `<fp>/<2 hex>/<32 hex>.kvb`.
//!
//! A file is a fixed-size little-endian header and then the block's raw data:
//!
//! | field          | bytes            | note                                            |
//! |----------------|------------------|-------------------------------------------------|
//! | magic          | 4                | `HKVB`                                          |
//! | version        | 4 (u32)          | [`VERSION`]                                     |
//! | fingerprint    | 16 (u128)        | model + tokenizer + KV scheme + namespace       |
//! | hash, parent   | 16 + 16 (u128)   | the block's name and its parent's               |
//! | layout         | 4 × 4 (u32) + 2  | layers, kv_heads, head_dim, block_size; dtype code, dtype_size |
//! | tokens         | block_size × 4   | the block's token ids                           |
//! | data_len       | 8 (u64)          |                                                 |
//! | data hash      | 8 (u64)          | xxh3-64 of the data (checked on restore)        |
//! | header hash    | 8 (u64)          | xxh3-64 of every header byte before it          |
//!
//! Everything that names or shapes the block is in the header and covered by its hash, so a start-up scan can
//! validate a file by reading only its header; the data hash is checked when the data is read back (a restore
//! reads it anyway; docs/benchmarks.md measures what hashing adds to a restore).
//! Files are written to `<name>.tmp`, fsynced and renamed, so a crash leaves either a whole file or an orphan
//! `.tmp` (reaped at start).

use super::prefix::BlockHash;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use xxhash_rust::xxh3::xxh3_64;

/// Shape of one block's data, part of the fingerprint and checked on every file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockLayout {
    pub layers: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
    /// The KV cache's encoding, as `--kv-cache-dtype` names it: "f32" | "f16" | "bf16" | "q8_0" | "q4_0" |
    /// "turbo:kXvY"
    pub dtype: String,
    /// Bytes of one element of its buffers (1 for an encoded cache's bytes).
    pub dtype_size: usize,
}

impl BlockLayout {
    /// Buffer elements of one head row of K plus one of V (an encoded row: its codes' bytes and its scales').
    pub fn head_units(&self) -> usize {
        match super::KvEncoding::parse(&self.dtype) {
            Ok(Some(e)) => e.key.units(self.head_dim) + e.value.units(self.head_dim),
            _ => 2 * self.head_dim,
        }
    }

    /// K and V of every layer: `layers * block_size * kv_heads * head_units * dtype_size`.
    pub fn data_bytes(&self) -> usize {
        self.layers * self.block_size * self.kv_heads * self.head_units() * self.dtype_size
    }
}

pub const MAGIC: [u8; 4] = *b"HKVB";
pub const VERSION: u32 = 1;
/// Block files end in this; anything else in a 2-hex directory is foreign.
pub const EXT: &str = "kvb";
/// Unfinished writes end in this (`<hash>.kvb.tmp`); they are never valid and are deleted at start.
pub const TMP_SUFFIX: &str = ".tmp";
/// Where bad files go (kept for post-mortems, bounded by [`QUARANTINE_KEEP`]).
pub const QUARANTINE: &str = "quarantine";
pub const QUARANTINE_KEEP: usize = 64;

/// Magic, version, fingerprint, hash, parent, four u32 dims, dtype code and size.
const FIXED_LEN: usize = 4 + 4 + 16 * 3 + 4 * 4 + 2;
/// data_len, data hash, header hash.
const TAIL_LEN: usize = 8 * 3;

/// Why a file cannot be served. The message is what gets logged when the file is quarantined.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("file not found")]
    NotFound,
    #[error("i/o error: {0}")]
    Io(io::Error),
    #[error("not a regular file")]
    NotFile,
    #[error("bad length: {actual} bytes, expected {expected}")]
    Length { actual: u64, expected: u64 },
    #[error("bad magic")]
    Magic,
    #[error("format version {0}, expected {VERSION}")]
    Version(u32),
    #[error("header hash mismatch")]
    HeaderHash,
    #[error("fingerprint {0:032x} is not this store's")]
    Fingerprint(u128),
    #[error("block layout differs from this store's")]
    Layout,
    #[error("data length {0} differs from the layout's")]
    DataLen(u64),
    #[error("file name does not match the stored hash {0}")]
    Name(String),
    #[error("data hash mismatch")]
    DataHash,
    #[error("stored {0} differs from the requested block's")]
    Mismatch(&'static str),
}

impl From<io::Error> for FileError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::NotFound {
            FileError::NotFound
        } else {
            FileError::Io(e)
        }
    }
}

/// The encoding as stored: one code per encoding the engine keeps KV in (`turbo:kXvY`: 100 + 10·X + Y);
/// anything else disables the tier rather than being written under an ambiguous code.
pub fn dtype_code(dtype: &str) -> Option<u8> {
    use super::RowCode;
    let enc = super::KvEncoding::parse(dtype).ok().flatten()?;
    match (enc.key, enc.value) {
        (RowCode::F32, RowCode::F32) => Some(1),
        (RowCode::F16, RowCode::F16) => Some(2),
        (RowCode::BF16, RowCode::BF16) => Some(3),
        (RowCode::Q8_0, RowCode::Q8_0) => Some(4),
        (RowCode::Q4_0, RowCode::Q4_0) => Some(5),
        (k, v) => Some(100 + 10 * k.bits() as u8 + v.bits() as u8),
    }
}

/// The header fields of one block file that vary per block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub hash: BlockHash,
    pub parent: BlockHash,
    pub tokens: Vec<u32>,
    pub data_len: u64,
    pub data_hash: u64,
}

/// What every file of one store agrees on (fingerprint and layout, encoded once), and the codec of its header.
#[derive(Debug, Clone)]
pub struct Format {
    fingerprint: u128,
    /// The four layout dims as stored, then dtype code and size.
    dims: [u32; 4],
    dtype: [u8; 2],
    block_size: usize,
    data_len: u64,
}

impl Format {
    /// Fails (with a reason) on a layout that cannot be stored: unknown dtype, a dim over u32, zero block size.
    pub fn new(fingerprint: u128, layout: &BlockLayout) -> Result<Self, String> {
        let dim = |v: usize, name: &str| u32::try_from(v).map_err(|_| format!("{name} {v} does not fit the format"));
        let dims = [
            dim(layout.layers, "layers")?,
            dim(layout.kv_heads, "kv_heads")?,
            dim(layout.head_dim, "head_dim")?,
            dim(layout.block_size, "block_size")?,
        ];
        let code = dtype_code(&layout.dtype).ok_or_else(|| format!("unsupported KV dtype {:?}", layout.dtype))?;
        let size = u8::try_from(layout.dtype_size).map_err(|_| format!("dtype_size {}", layout.dtype_size))?;
        if layout.block_size == 0 || layout.dtype_size == 0 {
            return Err("empty block layout".into());
        }
        let data_len = [layout.layers, layout.block_size, layout.kv_heads, layout.head_units(), layout.dtype_size]
            .iter()
            .try_fold(1u64, |acc, &v| acc.checked_mul(v as u64))
            .ok_or("block data size overflows")?;
        Ok(Format { fingerprint, dims, dtype: [code, size], block_size: layout.block_size, data_len })
    }

    pub fn header_len(&self) -> usize {
        FIXED_LEN + 4 * self.block_size + TAIL_LEN
    }

    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// Size of every block file of this store.
    pub fn file_len(&self) -> u64 {
        self.header_len() as u64 + self.data_len
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The header of a block holding `data` (whose length the caller has checked against the layout).
    pub fn encode(&self, hash: BlockHash, parent: BlockHash, tokens: &[u32], data: &[u8]) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.header_len());
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&self.fingerprint.to_le_bytes());
        b.extend_from_slice(&hash.to_bytes());
        b.extend_from_slice(&parent.to_bytes());
        for d in self.dims {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&self.dtype);
        for t in tokens {
            b.extend_from_slice(&t.to_le_bytes());
        }
        b.extend_from_slice(&(data.len() as u64).to_le_bytes());
        b.extend_from_slice(&xxh3_64(data).to_le_bytes());
        let h = xxh3_64(&b);
        b.extend_from_slice(&h.to_le_bytes());
        b
    }

    /// Parses and checks a header read from the start of a file (`buf` may be short: a truncated file). Checks
    /// run cheapest-to-explain first: magic and version before the header hash, so a foreign file is reported
    /// as such rather than as corrupt.
    pub fn decode(&self, buf: &[u8]) -> Result<Header, FileError> {
        let short = || FileError::Length { actual: buf.len() as u64, expected: self.header_len() as u64 };
        if buf.len() < 8 {
            return Err(short());
        }
        if buf[..4] != MAGIC {
            return Err(FileError::Magic);
        }
        let version = u32_at(buf, 4);
        if version != VERSION {
            return Err(FileError::Version(version));
        }
        if buf.len() < self.header_len() {
            return Err(short());
        }
        let hashed = self.header_len() - 8;
        if xxh3_64(&buf[..hashed]) != u64_at(buf, hashed) {
            return Err(FileError::HeaderHash);
        }
        let fingerprint = u128_at(buf, 8);
        if fingerprint != self.fingerprint {
            return Err(FileError::Fingerprint(fingerprint));
        }
        let dims = [u32_at(buf, 56), u32_at(buf, 60), u32_at(buf, 64), u32_at(buf, 68)];
        if dims != self.dims || buf[72..74] != self.dtype {
            return Err(FileError::Layout);
        }
        let tokens = (0..self.block_size).map(|i| u32_at(buf, FIXED_LEN + 4 * i)).collect();
        let tail = FIXED_LEN + 4 * self.block_size;
        let data_len = u64_at(buf, tail);
        if data_len != self.data_len {
            return Err(FileError::DataLen(data_len));
        }
        Ok(Header {
            hash: BlockHash(u128_at(buf, 24)),
            parent: BlockHash(u128_at(buf, 40)),
            tokens,
            data_len,
            data_hash: u64_at(buf, tail + 8),
        })
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn u128_at(b: &[u8], at: usize) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    u128::from_le_bytes(a)
}

/// Where block `h` lives under the fingerprint directory (256 subdirectories keep directories small).
pub fn block_path(fp_dir: &Path, h: BlockHash) -> PathBuf {
    let hex = h.hex();
    fp_dir.join(&hex[..2]).join(format!("{hex}.{EXT}"))
}

/// A block file opened and its header checked (magic, version, header hash, fingerprint, layout, that its name
/// is its hash, and that its length is header + data); the data is not read yet.
pub struct BlockFile {
    pub file: File,
    pub header: Header,
}

impl BlockFile {
    pub fn open(path: &Path, fmt: &Format) -> Result<Self, FileError> {
        // symlink_metadata: a link or a directory in a block's place is never followed.
        if !fs::symlink_metadata(path)?.file_type().is_file() {
            return Err(FileError::NotFile);
        }
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let mut buf = Vec::with_capacity(fmt.header_len());
        (&file).take(fmt.header_len() as u64).read_to_end(&mut buf)?;
        let header = fmt.decode(&buf)?;
        let stem = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".kvb"));
        if stem != Some(header.hash.hex().as_str()) {
            return Err(FileError::Name(header.hash.hex()));
        }
        if len != fmt.file_len() {
            return Err(FileError::Length { actual: len, expected: fmt.file_len() });
        }
        Ok(BlockFile { file, header })
    }

    /// The data (its length was checked against the layout by `open`, so this allocation is bounded), with
    /// `verify` checked against the stored data hash.
    pub fn read_data(&mut self, verify: bool) -> Result<Vec<u8>, FileError> {
        let mut data = vec![0u8; self.header.data_len as usize];
        self.file.read_exact(&mut data).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => FileError::Length { actual: 0, expected: self.header.data_len },
            _ => FileError::Io(e),
        })?;
        if verify && xxh3_64(&data) != self.header.data_hash {
            return Err(FileError::DataHash);
        }
        Ok(data)
    }
}

/// Writes one block atomically: `tmp`, fsync, rename, fsync of the directory.
pub fn write_block(path: &Path, header: &[u8], data: &[u8]) -> io::Result<()> {
    let tmp = write_tmp(path, header, data)?;
    let res = tmp.sync_all().and_then(|()| commit(&tmp_path(path), path));
    if res.is_err() {
        let _ = fs::remove_file(tmp_path(path));
    }
    res?;
    if let Some(dir) = path.parent() {
        sync_dir(dir);
    }
    Ok(())
}

/// The temporary name a block is written under before its rename.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(TMP_SUFFIX);
    PathBuf::from(tmp)
}

/// Writes a block's bytes to its temporary file (not yet durable, not yet visible under its name); returns the
/// open file. A group of these is made durable at once with [`sync_filesystem`], then [`commit`]ted.
pub fn write_tmp(path: &Path, header: &[u8], data: &[u8]) -> io::Result<File> {
    let dir = path.parent().ok_or_else(|| io::Error::other("block path has no parent"))?;
    fs::create_dir_all(dir)?;
    let tmp = tmp_path(path);
    let res = (|| {
        let mut f = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        f.write_all(header)?;
        f.write_all(data)?;
        // The kernel stamps writes with a coarse clock; restores stamp with `SystemTime::now()`. One clock for
        // both keeps the LRU order that the start-up scan reads from mtimes.
        let _ = f.set_modified(SystemTime::now());
        Ok(f)
    })();
    if res.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    res
}

/// Makes a durable temporary file visible under its final name.
pub fn commit(tmp: &Path, path: &Path) -> io::Result<()> {
    fs::rename(tmp, path)
}

/// Flushes everything written to the filesystem holding `file` (one `syncfs` for a whole group of blocks: one
/// journal commit instead of one per file). Elsewhere than Linux: `file`'s own fsync.
pub fn sync_filesystem(file: &File) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: syncfs only reads the descriptor, which `file` keeps open for the duration of the call.
        if unsafe { libc::syncfs(file.as_raw_fd()) } == 0 {
            return Ok(());
        }
        return Err(io::Error::last_os_error());
    }
    #[allow(unreachable_code)]
    file.sync_all()
}

/// Best-effort fsync of a directory (its entries: renames).
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Nanoseconds since the epoch (the LRU clock; file mtimes carry it across restarts).
pub fn epoch_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)).unwrap_or(0)
}

/// Removes `path` (a file, a link, or a whole directory; links are never followed).
fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) => Err(e),
    }
}

/// Moves a bad entry out of the store into `quarantine/` (named `<time>-<name>`, so the oldest sort first), or
/// deletes it if it cannot be moved. Logs once with `reason`. Never fails: a bad file that can be neither moved
/// nor deleted is still never served, since the caller has dropped it from its index.
pub fn quarantine(fp_dir: &Path, path: &Path, reason: &dyn std::fmt::Display) {
    let qdir = fp_dir.join(QUARANTINE);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let dest = qdir.join(format!("{:020}-{name}", epoch_ns(SystemTime::now())));
    let moved = fs::create_dir_all(&qdir).and_then(|_| fs::rename(path, &dest));
    match moved {
        Ok(()) => tracing::warn!("ssd cache: quarantined {}: {reason}", path.display()),
        Err(e) => match remove_any(path) {
            Ok(()) => tracing::warn!("ssd cache: deleted {} ({reason}); could not quarantine: {e}", path.display()),
            Err(e2) => tracing::warn!(
                "ssd cache: bad file {} ({reason}) can be neither moved ({e}) nor deleted ({e2})",
                path.display()
            ),
        },
    }
}

/// Deletes the oldest quarantined entries beyond [`QUARANTINE_KEEP`], so bad files cannot fill the disk.
pub fn prune_quarantine(fp_dir: &Path) {
    let Ok(rd) = fs::read_dir(fp_dir.join(QUARANTINE)) else { return };
    let mut names: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    if names.len() <= QUARANTINE_KEEP {
        return;
    }
    names.sort();
    for p in &names[..names.len() - QUARANTINE_KEEP] {
        let _ = remove_any(p);
    }
}

/// One valid block found by the start-up scan.
#[derive(Debug, Clone)]
pub struct Found {
    pub hash: BlockHash,
    pub size: u64,
    /// The file's mtime (the last write or restore), as the block's LRU access time.
    pub atime: u64,
}

/// What the start-up scan found: the good blocks and how many entries it quarantined.
#[derive(Debug, Default)]
pub struct Scan {
    pub found: Vec<Found>,
    pub quarantined: u64,
}

/// Walks `fp_dir` and its 2-hex subdirectories (only those: nothing else under the cache root is touched).
/// Orphan `.tmp` files are deleted; each `.kvb` file has its header checked (its data is checked when it is
/// restored: reading the whole tier at start would cost as much as restoring all of it); bad or unexpected
/// entries are quarantined.
pub fn scan(fp_dir: &Path, fmt: &Format) -> Scan {
    let mut out = Scan::default();
    let Ok(rd) = fs::read_dir(fp_dir) else { return out };
    for entry in rd.filter_map(|e| e.ok()) {
        let (path, name) = (entry.path(), entry.file_name());
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let name = name.to_str().unwrap_or("");
        if name == QUARANTINE && is_dir {
            continue;
        }
        if name.ends_with(TMP_SUFFIX) && !is_dir {
            let _ = fs::remove_file(&path);
        } else if is_dir && name.len() == 2 && name.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            scan_subdir(fp_dir, &path, name, fmt, &mut out);
        } else {
            quarantine(fp_dir, &path, &"unexpected entry in the cache directory");
            out.quarantined += 1;
        }
    }
    prune_quarantine(fp_dir);
    out
}

fn scan_subdir(fp_dir: &Path, dir: &Path, prefix: &str, fmt: &Format, out: &mut Scan) {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => {
            quarantine(fp_dir, dir, &format!("unreadable directory: {e}"));
            out.quarantined += 1;
            return;
        }
    };
    for entry in rd.filter_map(|e| e.ok()) {
        let path = entry.path();
        let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let name = entry.file_name();
        let name = name.to_str().unwrap_or("");
        if name.ends_with(TMP_SUFFIX) && !is_dir {
            let _ = fs::remove_file(&path);
            continue;
        }
        let is_block_name = name.strip_suffix(".kvb").is_some_and(|stem| {
            stem.len() == 32 && stem.starts_with(prefix) && stem.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        });
        let checked =
            if is_block_name { check_file(&path, fmt) } else { Err(FileError::Name("(unexpected name)".into())) };
        match checked {
            Ok(found) => out.found.push(found),
            Err(e) => {
                quarantine(fp_dir, &path, &e);
                out.quarantined += 1;
            }
        }
    }
}

fn check_file(path: &Path, fmt: &Format) -> Result<Found, FileError> {
    let bf = BlockFile::open(path, fmt)?;
    let atime = bf.file.metadata().and_then(|m| m.modified()).map(epoch_ns).unwrap_or(0);
    Ok(Found { hash: bf.header.hash, size: fmt.file_len(), atime })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> BlockLayout {
        BlockLayout { layers: 2, kv_heads: 1, head_dim: 4, block_size: 4, dtype: "f16".into(), dtype_size: 2 }
    }

    #[test]
    fn header_round_trips_and_every_byte_is_covered() {
        let fmt = Format::new(7, &layout()).unwrap();
        assert_eq!(fmt.data_len(), layout().data_bytes() as u64);
        let data = vec![3u8; fmt.data_len() as usize];
        let h = fmt.encode(BlockHash(11), BlockHash(5), &[1, 2, 3, 4], &data);
        assert_eq!(h.len(), fmt.header_len());
        let got = fmt.decode(&h).unwrap();
        assert_eq!((got.hash, got.parent, got.tokens.as_slice()), (BlockHash(11), BlockHash(5), &[1, 2, 3, 4][..]));
        for i in 0..h.len() {
            let mut bad = h.clone();
            bad[i] ^= 0x40;
            assert!(fmt.decode(&bad).is_err(), "flip at {i} accepted");
        }
        assert!(matches!(fmt.decode(&h[..h.len() - 1]), Err(FileError::Length { .. })));
        assert!(matches!(Format::new(8, &layout()).unwrap().decode(&h), Err(FileError::Fingerprint(7))));
        let other = BlockLayout { head_dim: 8, ..layout() };
        assert!(Format::new(7, &other).unwrap().decode(&h).is_err());
        assert!(Format::new(7, &BlockLayout { dtype: "q3".into(), ..layout() }).is_err());
        // a q8_0 block: D + D/32 bytes per head row, and a header of its own (another encoding never decodes it)
        let q8 = BlockLayout { head_dim: 64, dtype: "q8_0".into(), dtype_size: 1, ..layout() };
        let q8_fmt = Format::new(7, &q8).unwrap();
        assert_eq!(q8_fmt.data_len(), (2 * 2 * 4 * 66) as u64);
        assert_eq!(q8.data_bytes() as u64, q8_fmt.data_len());
        let f16_64 = Format::new(7, &BlockLayout { head_dim: 64, ..layout() }).unwrap();
        let f16_data = vec![3u8; f16_64.data_len() as usize];
        assert!(q8_fmt.decode(&f16_64.encode(BlockHash(11), BlockHash(5), &[1, 2, 3, 4], &f16_data)).is_err());
        // turbo:k8v3: K rows of 66 bytes, V rows of 26; a code of its own
        let k8v3 = BlockLayout { head_dim: 64, dtype: "turbo:k8v3".into(), dtype_size: 1, ..layout() };
        assert_eq!(Format::new(7, &k8v3).unwrap().data_len(), (2 * 4 * (66 + 26)) as u64);
        let codes: Vec<_> = ["f32", "f16", "bf16", "q8_0", "q4_0", "turbo:k8v3", "turbo:k4v3", "turbo:k3v4"]
            .iter()
            .map(|d| dtype_code(d).unwrap())
            .collect();
        assert!(codes.iter().enumerate().all(|(i, c)| !codes[..i].contains(c)), "codes {codes:?}");
    }
}
