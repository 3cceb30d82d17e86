//! The files idemguard writes that carry customer data — post-incident reports (order numbers,
//! payNos, who did what) and the console's log — are its owner's only: created 0600, in
//! directories it creates 0700 (whatever the umask). A directory that already exists is left as
//! its owner made it (`console.report_dir` may be a team's shared directory on purpose).
//!
//! A report is never written through a name that is already there: in a shared directory that
//! name may be a symbolic link someone planted, and opening it for writing would overwrite (and
//! narrow) the file it points to. A report is written whole into a temporary file of its own
//! (`create_new`: `O_EXCL` never follows a link), then put in place — by a hard link that fails
//! when the name exists ([`write_new`]: the next free name is taken), or by a rename that
//! replaces the name itself ([`write`]: a link there is refused).

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of a file with customer data.
pub const FILE_MODE: u32 = 0o600;
/// Mode of a directory idemguard creates for such files.
pub const DIR_MODE: u32 = 0o700;
/// Names [`write_new`] tries (`report.md`, `report-2.md`, … `report-100.md`) before it refuses.
pub const MAX_NAMES: u32 = 100;

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

/// Writes `text` to `path`, 0600, creating its directory 0700: written beside it, then renamed
/// over it, so a file there is replaced, never written into. A symbolic link at `path` is
/// refused (the report is not put where the link's owner pointed the name).
pub fn write(path: &Path, text: &str) -> io::Result<()> {
    let dir = directory_of(path);
    create_dir_all(dir)?;
    if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "it is a symbolic link: nothing is written through a link (remove it, or name another file)",
        ));
    }
    let temporary = write_temporary(dir, text)?;
    // A link planted since the check is replaced by the rename, not followed.
    fs::rename(&temporary, path).inspect_err(|_| {
        let _ = fs::remove_file(&temporary);
    })
}

/// Writes `text` into `dir` as a new file `{stem}.{ext}`, 0600 — or `{stem}-2.{ext}`, `-3`, …
/// when that name is taken (by a file, or by a link wherever it points): an existing name is
/// never written through. Returns the path written. `dir` must exist.
pub fn write_new(dir: &Path, stem: &str, ext: &str, text: &str) -> io::Result<PathBuf> {
    let temporary = write_temporary(dir, text)?;
    let placed = place_under_a_free_name(&temporary, dir, stem, ext);
    let _ = fs::remove_file(&temporary);
    placed
}

/// Links `temporary` as the first free name of `stem` in `dir`: `link(2)` fails on a name that
/// exists — a dangling link included — so no check can go stale before it.
fn place_under_a_free_name(
    temporary: &Path,
    dir: &Path,
    stem: &str,
    ext: &str,
) -> io::Result<PathBuf> {
    for n in 1..=MAX_NAMES {
        let name = match n {
            1 => format!("{stem}.{ext}"),
            n => format!("{stem}-{n}.{ext}"),
        };
        let path = dir.join(name);
        match fs::hard_link(temporary, &path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{stem}.{ext} and {stem}-2.{ext} … {stem}-{MAX_NAMES}.{ext} are all taken: move the old reports away"),
    ))
}

/// A new hidden file in `dir` holding `text`, 0600, flushed to disk.
fn write_temporary(dir: &Path, text: &str) -> io::Result<PathBuf> {
    loop {
        let name = format!(
            ".idemguard-{}-{:016x}.tmp",
            std::process::id(),
            rand::random::<u64>()
        );
        let path = dir.join(name);
        let mut file = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        let written = file
            .set_permissions(Permissions::from_mode(FILE_MODE))
            .and_then(|()| file.write_all(text.as_bytes()))
            .and_then(|()| file.sync_all());
        return match written {
            Ok(()) => Ok(path),
            Err(e) => {
                let _ = fs::remove_file(&path);
                Err(e)
            }
        };
    }
}

/// The directory `path` is in (`.` for a bare file name).
fn directory_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
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

    /// A name already there — a file, a link to a file elsewhere, a dangling link — is never
    /// written through: the next free name is taken; the target keeps its content and mode, and
    /// no temporary file is left.
    #[test]
    fn a_new_report_never_writes_through_a_name_that_is_there() {
        use std::os::unix::fs::symlink;
        let shared = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let victim = elsewhere.path().join("victim");
        std::fs::write(&victim, "theirs").unwrap();
        std::fs::set_permissions(&victim, Permissions::from_mode(0o644)).unwrap();
        let dir = shared.path();
        symlink(&victim, dir.join("r.md")).unwrap();
        std::fs::write(dir.join("r-2.md"), "an older report").unwrap();
        symlink(elsewhere.path().join("nothing"), dir.join("r-3.md")).unwrap();
        let path = write_new(dir, "r", "md", "report").unwrap();
        assert_eq!(path, dir.join("r-4.md"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "report");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(
            (std::fs::read_to_string(&victim).unwrap(), mode(&victim)),
            ("theirs".into(), 0o644)
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("r-2.md")).unwrap(),
            "an older report"
        );
        assert!(
            !elsewhere.path().join("nothing").exists(),
            "a dangling link is not followed"
        );
        let names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(names.is_empty(), "{names:?}");
    }

    /// A file named on the command line is replaced whole; a link there is refused, and its
    /// target left as it was.
    #[test]
    fn a_named_file_is_replaced_and_a_link_refused() {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        let victim = root.path().join("victim");
        std::fs::write(&victim, "theirs").unwrap();
        let link = root.path().join("report.md");
        symlink(&victim, &link).unwrap();
        let refused = write(&link, "report").unwrap_err();
        assert!(refused.to_string().contains("symbolic link"), "{refused}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "theirs");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        write(&victim, "report").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "report");
    }
}
