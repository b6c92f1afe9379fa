//! Paths as kforge shows them: the user's home folder printed as `~`, so reports, logs and run
//! directories do not spell out where a machine keeps things.

use std::path::Path;

/// `path` with a leading home folder replaced by `~`.
pub fn display(path: &Path) -> String {
    if let Some(home) = dirs::home_dir()
        && home.as_os_str().len() > 1
        && let Ok(rest) = path.strip_prefix(&home)
    {
        return if rest.as_os_str().is_empty() {
            "~".to_string()
        } else {
            format!("~/{}", rest.display())
        };
    }
    path.display().to_string()
}

/// `text` with every spelled-out home folder (`/home/me/...`) written as `~/...`: for documents
/// that quote paths (a result's nvcc command line, a library's location) before they are kept.
pub fn scrub(text: &str) -> String {
    match dirs::home_dir() {
        Some(home) if home.as_os_str().len() > 1 => {
            let home = home.to_string_lossy();
            let home = home.trim_end_matches('/');
            text.replace(&format!("{home}/"), "~/")
        }
        _ => text.to_string(),
    }
}

/// The inverse of [`display`]: a leading `~/` is the home folder again.
pub fn expand(path: &Path) -> std::path::PathBuf {
    match (path.strip_prefix("~"), dirs::home_dir()) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_becomes_tilde() {
        let home = dirs::home_dir().unwrap();
        assert_eq!(display(&home.join(".cache/kforge")), "~/.cache/kforge");
        assert_eq!(
            display(Path::new("/usr/local/cuda/bin/nvcc")),
            "/usr/local/cuda/bin/nvcc"
        );
        let text = format!("nvcc -I{0}/x -L{0}/y", home.display());
        assert_eq!(scrub(&text), "nvcc -I~/x -L~/y");
        assert_eq!(
            expand(Path::new(&display(&home.join("a/b")))),
            home.join("a/b")
        );
        assert_eq!(expand(Path::new("/tmp/a")), Path::new("/tmp/a"));
    }
}
