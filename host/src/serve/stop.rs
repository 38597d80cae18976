//! Stop strings over streamed text: the text is let out as it comes, except a tail that could still be the
//! start of a stop string; generation ends before the first stop string, which is not part of the text.

/// Stop strings matched over text pushed piece by piece.
pub struct StopStrings {
    stops: Vec<String>,
    /// Text held back: it ends in what could be the start of a stop string.
    pending: String,
}

impl StopStrings {
    pub fn new(stops: Vec<String>) -> Self {
        StopStrings { stops, pending: String::new() }
    }

    /// Adds `piece`; returns the text now safe to let out, and whether a stop string ended the text (the
    /// text returned then ends right before it).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        self.pending += piece;
        if let Some(at) = self.stops.iter().filter_map(|s| self.pending.find(s.as_str())).min() {
            let out = self.pending[..at].to_string();
            self.pending.clear();
            return (out, true);
        }
        // hold back the longest tail that is a proper prefix of a stop string
        let held = self
            .pending
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&self.pending[i..])))
            .unwrap_or(self.pending.len());
        let out = self.pending[..held].to_string();
        self.pending.drain(..held);
        (out, false)
    }

    /// The text held back, at the end of generation.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::StopStrings;

    /// Pushes `pieces`; the text let out and whether it stopped.
    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut s = StopStrings::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            let (text, stopped) = s.push(p);
            out += &text;
            if stopped {
                return (out, true);
            }
        }
        out += &s.finish();
        (out, false)
    }

    #[test]
    fn stops_across_pieces_and_holds_back_only_prefixes() {
        assert_eq!(run(&["END"], &["Hello E", "N", "D more"]), ("Hello ".into(), true));
        assert_eq!(run(&["END"], &["Hello E", "x"]), ("Hello Ex".into(), false));
        assert_eq!(run(&["\n\n", "###"], &["a\n", "b##", "#c"]), ("a\nb".into(), true));
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
        // the earliest stop string wins; multi-byte text is never split
        assert_eq!(run(&["é", "b"], &["aébé"]), ("a".into(), true));
        let mut s = StopStrings::new(vec!["éx".into()]);
        assert_eq!(s.push("aé"), ("a".into(), false));
        assert_eq!(s.push("y"), ("éy".into(), false));
    }
}
