//! Fenced blocks (```` ```cuda ... ``` ````) in a model's reply, read the way Markdown reads them:
//! an opening line of three or more backticks with an info string, closed by a line of at least
//! as many backticks and nothing else.

/// One fenced block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FencedBlock {
    /// The first word of the info string, lowercased (`cuda`, `json`; empty when untagged).
    pub tag: String,
    pub body: String,
}

/// The blocks of a reply, and a last block that was opened and never closed (a reply cut off
/// at the output limit ends like that).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Fences {
    pub closed: Vec<FencedBlock>,
    pub unclosed: Option<FencedBlock>,
}

fn backticks(line: &str) -> usize {
    line.chars().take_while(|c| *c == '`').count()
}

pub(crate) fn fenced_blocks(text: &str) -> Fences {
    let mut fences = Fences::default();
    // The open block: its fence length, tag and lines so far.
    let mut open: Option<(usize, String, Vec<&str>)> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        let ticks = backticks(trimmed);
        match open.as_mut() {
            None if ticks >= 3 => {
                let tag = trimmed[ticks..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_lowercase();
                open = Some((ticks, tag, Vec::new()));
            }
            None => {}
            Some((fence, _, _)) if ticks >= *fence && ticks == trimmed.len() => {
                if let Some((_, tag, lines)) = open.take() {
                    fences.closed.push(FencedBlock {
                        tag,
                        body: join_lines(&lines),
                    });
                }
            }
            Some((_, _, lines)) => lines.push(line),
        }
    }
    fences.unclosed = open.map(|(_, tag, lines)| FencedBlock {
        tag,
        body: join_lines(&lines),
    });
    fences
}

fn join_lines(lines: &[&str]) -> String {
    let mut body = lines.join("\n");
    body.push('\n');
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_tags_and_unclosed_fences() {
        let fences = fenced_blocks(
            "Intro\n```CUDA title=k.cu\nint x;\n  ```\nmid\n````\n```nested```\n````\n```json\n{",
        );
        assert_eq!(
            fences.closed,
            vec![
                FencedBlock {
                    tag: "cuda".into(),
                    body: "int x;\n".into()
                },
                FencedBlock {
                    tag: "".into(),
                    body: "```nested```\n".into()
                },
            ]
        );
        assert_eq!(
            fences.unclosed,
            Some(FencedBlock {
                tag: "json".into(),
                body: "{\n".into()
            })
        );
        assert_eq!(fenced_blocks("no fences at all"), Fences::default());
    }
}
