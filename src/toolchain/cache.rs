//! The content-addressed compile cache: an entry per hash of (source, file name, flags,
//! toolchain fingerprint, ABI header), holding the shared object, the full nvcc log, the
//! SASS text and the parsed outcome. A repeat compile of the same input costs no nvcc run.
//!
//! Entries are written into a staging directory and renamed into place, so a killed
//! compile never leaves a half entry behind.

use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// Bumped whenever the layout of an entry or the meaning of the key changes.
const KEY_SCHEMA: &str = "cutesmith-compile-v2";

/// The hash naming a cache entry.
pub fn key(parts: &[&[u8]]) -> String {
    let mut h = blake3::Hasher::new();
    h.update(KEY_SCHEMA.as_bytes());
    for part in parts {
        // Length-prefix every part so ("ab","c") and ("a","bc") differ.
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize().to_hex()[..32].to_string()
}

/// The compile cache rooted at a directory (normally `<cache dir>/compile`).
#[derive(Debug, Clone)]
pub struct CompileCache {
    root: PathBuf,
}

impl CompileCache {
    /// A cache rooted at `root`; the directory is made on first store.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        CompileCache { root: root.into() }
    }

    /// The default cache under the user cache directory.
    pub fn default_location() -> Self {
        Self::new(super::cache_dir().join("compile"))
    }

    /// The directory an entry lives in once stored.
    pub fn entry_dir(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    /// The directory that holds the outcome of `key`, when a complete entry exists.
    pub fn lookup(&self, key: &str) -> Option<PathBuf> {
        let dir = self.entry_dir(key);
        dir.join(OUTCOME_FILE).is_file().then_some(dir)
    }

    /// A fresh staging directory for `key`, to be filled and then passed to [`commit`].
    ///
    /// [`commit`]: CompileCache::commit
    pub fn stage(&self, key: &str) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.root).at(&self.root)?;
        let dir = self.root.join(format!(
            ".staging-{key}-{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&dir).at(&dir)?;
        Ok(dir)
    }

    /// Moves a filled staging directory into place. If another process stored the same
    /// key meanwhile, its entry is kept and the staging copy dropped.
    pub fn commit(&self, key: &str, staging: &Path) -> Result<PathBuf> {
        let dest = self.entry_dir(key);
        if dest.join(OUTCOME_FILE).is_file() {
            let _ = std::fs::remove_dir_all(staging);
            return Ok(dest);
        }
        if dest.exists() {
            // A leftover without an outcome file is incomplete: replace it.
            std::fs::remove_dir_all(&dest).at(&dest)?;
        }
        match std::fs::rename(staging, &dest) {
            Ok(()) => Ok(dest),
            Err(_) if dest.join(OUTCOME_FILE).is_file() => {
                let _ = std::fs::remove_dir_all(staging);
                Ok(dest)
            }
            Err(e) => Err(Error::io(&dest, e)),
        }
    }

    /// Moves a staging directory whose outcome must not be cached (a timeout, `--no-cache`)
    /// to `uncached/`, where `clear` still finds it.
    pub fn keep_uncached(&self, key: &str, staging: &Path) -> Result<PathBuf> {
        let parent = self.root.join("uncached");
        std::fs::create_dir_all(&parent).at(&parent)?;
        let dest = parent.join(format!("{key}-{}-{}", std::process::id(), unique()));
        std::fs::rename(staging, &dest).at(&dest)?;
        Ok(dest)
    }

    /// The number of complete entries and the bytes the cache holds on disk.
    pub fn usage(&self) -> (usize, u64) {
        fn bytes(p: &Path) -> u64 {
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => std::fs::read_dir(p)
                    .map(|rd| rd.flatten().map(|e| bytes(&e.path())).sum())
                    .unwrap_or(0),
                Ok(m) => m.len(),
                Err(_) => 0,
            }
        }
        let entries = std::fs::read_dir(&self.root)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().join(OUTCOME_FILE).is_file())
                    .count()
            })
            .unwrap_or(0);
        (entries, bytes(&self.root))
    }

    /// The directory the cache lives in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Removes every entry; returns how many there were.
    pub fn clear(&self) -> Result<usize> {
        let Ok(read) = std::fs::read_dir(&self.root) else {
            return Ok(0);
        };
        let mut n = 0;
        for entry in read.flatten() {
            let path = entry.path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path).at(&path)?;
                n += 1;
            }
        }
        Ok(n)
    }
}

/// Name of the file holding the parsed outcome; its presence marks a complete entry.
pub const OUTCOME_FILE: &str = "outcome.json";

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_depends_on_every_part_and_on_boundaries() {
        let k = key(&[b"ab", b"c"]);
        assert_eq!(k, key(&[b"ab", b"c"]));
        assert_ne!(k, key(&[b"a", b"bc"]));
        assert_ne!(k, key(&[b"ab", b"d"]));
        assert_eq!(k.len(), 32);
    }

    #[test]
    fn stage_commit_lookup_clear() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(dir.path().join("c"));
        assert!(cache.lookup("k1").is_none());
        let s = cache.stage("k1").unwrap();
        std::fs::write(s.join("kernel.so"), b"x").unwrap();
        // Without the outcome file the entry is not complete.
        let dest = cache.commit("k1", &s).unwrap();
        assert!(cache.lookup("k1").is_none());
        std::fs::write(dest.join(OUTCOME_FILE), b"{}").unwrap();
        assert_eq!(cache.lookup("k1"), Some(dest.clone()));
        // A second commit of the same key keeps the first entry.
        let s2 = cache.stage("k1").unwrap();
        std::fs::write(s2.join("kernel.so"), b"y").unwrap();
        assert_eq!(cache.commit("k1", &s2).unwrap(), dest);
        assert_eq!(std::fs::read(dest.join("kernel.so")).unwrap(), b"x");
        assert!(!s2.exists());
        assert_eq!(cache.usage().0, 1);
        assert!(cache.usage().1 >= 3);
        let s3 = cache.stage("k2").unwrap();
        let kept = cache.keep_uncached("k2", &s3).unwrap();
        assert!(kept.starts_with(dir.path().join("c/uncached")));
        assert_eq!(cache.clear().unwrap(), 2);
        assert_eq!(cache.usage(), (0, 0));
        assert!(cache.lookup("k1").is_none());
    }
}
