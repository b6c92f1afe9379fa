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
    }
}
