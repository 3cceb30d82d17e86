//! The files idemguard writes that carry customer data — post-incident reports (order numbers,
//! payNos, who did what) and the console's log — are its owner's only: created 0600, in
//! directories it creates 0700 (whatever the umask), and a file that already exists with a
//! wider mode is narrowed before it is written. A directory that already exists is left as its
//! owner made it (`console.report_dir` may be a team's shared directory on purpose).

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of a file with customer data.
pub const FILE_MODE: u32 = 0o600;
/// Mode of a directory idemguard creates for such files.
pub const DIR_MODE: u32 = 0o700;

/// Creates `dir` and its missing parents, each 0700.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Opens `path` for writing (appending, or truncated), 0600, creating its directory 0700.
pub fn open(path: &Path, append: bool) -> io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_dir_all(dir)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .mode(FILE_MODE)
        .open(path)?;
    // `mode` applies only to a file it creates: one written before with 0644 is narrowed.
    if file.metadata()?.permissions().mode() & 0o777 != FILE_MODE {
        file.set_permissions(Permissions::from_mode(FILE_MODE))?;
    }
    Ok(file)
}

/// Writes `text` to `path` (replacing it), 0600.
pub fn write(path: &Path, text: &str) -> io::Result<()> {
    open(path, false)?.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_the_owners_only_and_so_are_the_directories_made_for_them() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("a/b/report.md");
        write(&path, "x").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&root.path().join("a")), 0o700);
        assert_eq!(mode(&root.path().join("a/b")), 0o700);
        // An existing world-readable file is narrowed, and replaced.
        let old = root.path().join("old.log");
        std::fs::write(&old, "secret").unwrap();
        std::fs::set_permissions(&old, Permissions::from_mode(0o644)).unwrap();
        write(&old, "new").unwrap();
        assert_eq!(
            (mode(&old), std::fs::read_to_string(&old).unwrap()),
            (0o600, "new".into())
        );
        // Appending keeps what is there.
        let mut f = open(&old, true).unwrap();
        f.write_all(b"+").unwrap();
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "new+");
    }
}
