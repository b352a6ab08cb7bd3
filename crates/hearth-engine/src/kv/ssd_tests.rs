//! Tests of the SSD tier ([`super`]): round trips, restarts, damaged files, the byte cap, gating.

use super::*;
use std::io::Write as _;

const FP: u128 = 0xfeed;

fn layout() -> BlockLayout {
    BlockLayout { layers: 2, kv_heads: 1, head_dim: 4, block_size: 4, dtype: "f32".into(), dtype_size: 4 }
}

fn cfg(dir: &Path, fingerprint: u128, max_bytes: u64, verify: bool) -> SsdConfig {
    SsdConfig { dir: dir.to_path_buf(), max_bytes, verify, fingerprint, layout: layout() }
}

fn file_len() -> u64 {
    Format::new(FP, &layout()).unwrap().file_len()
}

/// Block `i` of one chain (hash = parent.child(tokens), as the engine names them).
fn rec(i: u32) -> BlockRecord {
    let parent = BlockHash::root(b"test").child(&[i, i]);
    let tokens = vec![i, i + 1, i + 2, i + 3];
    let data = (0..layout().data_bytes()).map(|j| (j as u32 * 7 + i * 13) as u8).collect();
    BlockRecord { hash: parent.child(&tokens), parent, tokens, data }
}

fn get(s: &SsdStore, r: &BlockRecord) -> Option<Vec<u8>> {
    s.restore(r.hash, r.parent, &r.tokens)
}

fn flush(s: &SsdStore) {
    s.flush().recv_timeout(Duration::from_secs(10)).unwrap();
}

fn path_of(dir: &Path, fp: u128, r: &BlockRecord) -> PathBuf {
    ssd_file::block_path(&dir.join(format!("{fp:032x}")), r.hash)
}

#[test]
fn round_trip_from_queue_and_from_file() {
    let d = tempfile::tempdir().unwrap();
    let s = SsdStore::open(cfg(d.path(), FP, 1 << 20, false));
    assert!(s.stats().enabled);
    let (a, path) = (rec(1), path_of(d.path(), FP, &rec(1)));
    s.set_busy(true); // hold the write so the first restore is served from the queue
    s.spill(a.clone(), true);
    assert!(s.contains(a.hash));
    assert_eq!(get(&s, &a), Some(a.data.clone()));
    assert!(!path.exists());
    assert_eq!(s.restore(a.hash, a.parent, &[9, 9, 9, 9]), None, "wrong tokens while queued");
    flush(&s);
    assert!(path.exists());
    assert_eq!(get(&s, &a), Some(a.data.clone()));
    s.spill(a.clone(), false); // already on disk: only refreshes its access time
    let st = s.stats();
    assert_eq!((st.files, st.bytes, st.spills, st.demotions, st.restores), (1, file_len(), 1, 1, 2));
    // A stored block that is not the one asked for is a miss (and the file is set aside).
    assert_eq!(s.restore(a.hash, BlockHash(1), &a.tokens), None);
    assert!(!s.contains(a.hash));
    let b = rec(2);
    s.spill(b.clone(), false);
    flush(&s);
    assert_eq!(s.restore(b.hash, b.parent, &a.tokens), None);
    assert_eq!(s.stats().restore_failures, 3);
    assert_eq!(s.stats().files, 0);
}

#[test]
fn blocks_survive_a_restart_under_their_fingerprint_only() {
    let d = tempfile::tempdir().unwrap();
    let s = SsdStore::open(cfg(d.path(), FP, 1 << 20, true));
    let (a, b) = (rec(1), rec(2));
    s.spill(a.clone(), false);
    s.spill(b.clone(), false);
    flush(&s);
    s.shutdown();
    drop(s);
    let s = SsdStore::open(cfg(d.path(), FP, 1 << 20, true));
    assert!(s.contains(a.hash) && s.contains(b.hash));
    assert_eq!(get(&s, &a), Some(a.data.clone()));
    assert_eq!(get(&s, &b), Some(b.data.clone()));
    assert_eq!((s.stats().files, s.stats().quarantined), (2, 0));
    s.shutdown();
    let other = SsdStore::open(cfg(d.path(), FP + 1, 1 << 20, true));
    assert!(!other.contains(a.hash));
    assert_eq!(get(&other, &a), None);
    assert_eq!(other.stats().files, 0);
    assert!(path_of(d.path(), FP, &a).exists() && path_of(d.path(), FP, &b).exists());
}

/// A store with good block 1 and victim block 2 on disk, shut down; returns the victim's path.
fn seeded(dir: &Path, verify: bool) -> PathBuf {
    let s = SsdStore::open(cfg(dir, FP, 1 << 20, verify));
    s.spill(rec(1), false);
    s.spill(rec(2), false);
    flush(&s);
    s.shutdown();
    path_of(dir, FP, &rec(2))
}

/// Reopens after damage: `bad` entries quarantined, the victim never served, good blocks still work.
fn reopen_and_check(dir: &Path, verify: bool, bad: u64, gone: &Path) -> Arc<SsdStore> {
    let s = SsdStore::open(cfg(dir, FP, 1 << 20, verify));
    assert_eq!(s.stats().quarantined, bad, "{}", gone.display());
    assert!(!gone.exists(), "{} left in place", gone.display());
    let v = rec(2);
    assert_eq!(get(&s, &v), None);
    assert_eq!(get(&s, &rec(1)), Some(rec(1).data));
    s.spill(rec(3), false);
    flush(&s);
    assert_eq!(get(&s, &rec(3)), Some(rec(3).data));
    s
}

fn flip(path: &Path, at: u64) {
    let mut b = fs::read(path).unwrap();
    b[at as usize] ^= 0x10;
    fs::write(path, b).unwrap();
}

#[test]
fn damaged_files_are_quarantined_at_start() {
    let header_len = file_len() - layout().data_bytes() as u64;
    // Flipped header byte (in the parent field); truncated file.
    let d = tempfile::tempdir().unwrap();
    let p = seeded(d.path(), false);
    flip(&p, 45);
    reopen_and_check(d.path(), false, 1, &p);
    assert_eq!(fs::read_dir(d.path().join(format!("{FP:032x}/quarantine"))).unwrap().count(), 1);
    let d = tempfile::tempdir().unwrap();
    let p = seeded(d.path(), false);
    fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(file_len() - 10).unwrap();
    reopen_and_check(d.path(), false, 1, &p);
    // Garbage under a valid name; a directory where a block file should be.
    let d = tempfile::tempdir().unwrap();
    let p = seeded(d.path(), false);
    fs::write(&p, vec![0xa5u8; file_len() as usize]).unwrap();
    let as_dir = path_of(d.path(), FP, &rec(4));
    fs::create_dir_all(as_dir.join("inner")).unwrap();
    let s = reopen_and_check(d.path(), false, 2, &p);
    assert!(!as_dir.exists() && !s.contains(rec(4).hash));
    // A correctly named, well-formed file of another fingerprint.
    let d = tempfile::tempdir().unwrap();
    let p = seeded(d.path(), false);
    let o = SsdStore::open(cfg(d.path(), FP + 1, 1 << 20, false));
    o.spill(rec(2), false);
    flush(&o);
    fs::copy(path_of(d.path(), FP + 1, &rec(2)), &p).unwrap();
    reopen_and_check(d.path(), false, 1, &p);
    assert!(path_of(d.path(), FP + 1, &rec(2)).exists(), "the other fingerprint's files are not ours");
    // Orphan temporaries are deleted, not quarantined; stray names are quarantined.
    let d = tempfile::tempdir().unwrap();
    fs::remove_file(seeded(d.path(), false)).unwrap();
    let good = p_of(d.path(), 1);
    let tmp = good.with_extension("kvb.tmp");
    fs::write(&tmp, b"half").unwrap();
    let top_tmp = d.path().join(format!("{FP:032x}/x.tmp"));
    fs::write(&top_tmp, b"half").unwrap();
    let stray = good.with_file_name("notes.txt");
    fs::write(&stray, b"?").unwrap();
    reopen_and_check(d.path(), false, 1, &tmp);
    assert!(!top_tmp.exists() && !stray.exists() && good.exists());
    // Flipped data byte: the start-up scan reads headers only; the data hash catches it on restore (with
    // `verify`, the default), without `verify` the damaged data is served.
    let d = tempfile::tempdir().unwrap();
    let p = seeded(d.path(), false);
    flip(&p, header_len + 3);
    let s = SsdStore::open(cfg(d.path(), FP, 1 << 20, false));
    assert_eq!(s.stats().quarantined, 0);
    let served = get(&s, &rec(2)).unwrap();
    assert_ne!(served, rec(2).data, "without verify the damaged data is served");
    s.shutdown();
    let s = SsdStore::open(cfg(d.path(), FP, 1 << 20, true));
    assert_eq!((s.stats().quarantined, s.stats().files), (0, 2), "the scan reads headers only");
    assert_eq!(get(&s, &rec(2)), None);
    assert_eq!(get(&s, &rec(1)), Some(rec(1).data));
    assert_eq!(s.stats().quarantined, 1);
    assert!(!p.exists());
}

fn p_of(dir: &Path, i: u32) -> PathBuf {
    path_of(dir, FP, &rec(i))
}

#[test]
fn verify_catches_damaged_data_at_restore() {
    let d = tempfile::tempdir().unwrap();
    let s = SsdStore::open(cfg(d.path(), FP, 1 << 20, true));
    s.spill(rec(2), false);
    flush(&s);
    flip(&p_of(d.path(), 2), file_len() - 1);
    assert_eq!(get(&s, &rec(2)), None);
    let st = s.stats();
    assert_eq!((st.quarantined, st.restore_failures, st.files), (1, 1, 0));
    assert!(!p_of(d.path(), 2).exists() && !s.contains(rec(2).hash));
}

#[cfg(unix)]
#[test]
fn unreadable_file_is_quarantined() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let p = seeded(d.path(), false);
    fs::set_permissions(&p, fs::Permissions::from_mode(0o000)).unwrap();
    if fs::read(&p).is_ok() {
        // Permissions do not stop this user (root): a FIFO in the block's place cannot be read by anyone (and
        // opening it would block the start-up scan forever if it were not refused before opening).
        fs::remove_file(&p).unwrap();
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a filesystem entry.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }
    reopen_and_check(d.path(), false, 1, &p);
}

#[test]
fn byte_cap_keeps_the_most_recently_used() {
    let d = tempfile::tempdir().unwrap();
    let s = SsdStore::open(cfg(d.path(), FP, file_len() * 5 / 2, false));
    let r: Vec<_> = (0..4).map(rec).collect();
    s.spill(r[0].clone(), false);
    s.spill(r[1].clone(), false);
    flush(&s);
    assert!(get(&s, &r[0]).is_some()); // 0 is now more recent than 1
    s.spill(r[2].clone(), false);
    flush(&s);
    let on: Vec<bool> = r.iter().map(|x| s.contains(x.hash)).collect();
    assert_eq!(on, [true, false, true, false]);
    assert!(get(&s, &r[0]).is_some());
    s.spill(r[3].clone(), false);
    flush(&s);
    let on: Vec<bool> = r.iter().map(|x| s.contains(x.hash)).collect();
    assert_eq!(on, [true, false, false, true]);
    assert!(!p_of(d.path(), 1).exists() && !p_of(d.path(), 2).exists());
    assert_eq!((s.stats().files, s.stats().bytes), (2, 2 * file_len()));
    // The LRU order survives a restart (mtimes), and the cap applies at start.
    s.shutdown();
    let s = SsdStore::open(cfg(d.path(), FP, file_len() * 3 / 2, false));
    assert!(!s.contains(r[0].hash) && s.contains(r[3].hash));
}

#[test]
fn unusable_directory_disables_the_store() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("not-a-dir");
    fs::File::create(&file).unwrap().write_all(b"x").unwrap();
    let s = SsdStore::open(cfg(&file, FP, 1 << 20, true));
    let st = s.stats();
    assert!(!st.enabled && st.warning.is_some());
    s.spill(rec(1), false);
    flush(&s);
    assert!(!s.contains(rec(1).hash));
    assert_eq!(get(&s, &rec(1)), None);
    assert_eq!(s.stats().spills, 0);
    s.shutdown();
}

#[test]
fn busy_engine_holds_writes_back_but_not_flushes() {
    let d = tempfile::tempdir().unwrap();
    let s = SsdStore::open(cfg(d.path(), FP, 1 << 20, false));
    s.set_busy(true);
    s.spill(rec(1), false);
    std::thread::sleep(Duration::from_millis(60));
    assert!(!p_of(d.path(), 1).exists());
    assert_eq!(s.stats().pending, 1);
    flush(&s);
    assert!(p_of(d.path(), 1).exists());
    assert_eq!(s.stats().pending, 0);
    s.spill(rec(2), false);
    std::thread::sleep(Duration::from_millis(60));
    assert!(!p_of(d.path(), 2).exists());
    s.set_busy(false);
    let t0 = Instant::now();
    while !p_of(d.path(), 2).exists() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(p_of(d.path(), 2).exists());
    // Dropping the last handle lets the writer finish its queue.
    s.set_busy(true);
    s.spill(rec(3), false);
    drop(s);
    let t0 = Instant::now();
    while !p_of(d.path(), 3).exists() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(p_of(d.path(), 3).exists());
}

#[test]
fn store_is_shared_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<SsdStore>();
}
