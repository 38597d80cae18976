//! The top module's ports from its Verilog, and their members in the Verilator model class.

use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dir {
    In,
    Out,
    InOut,
}

#[derive(Debug)]
pub(crate) struct Port {
    /// Verilog name.
    pub(crate) name: String,
    pub(crate) dir: Dir,
    pub(crate) bits: u32,
    pub(crate) signed: bool,
    /// Member name in the Verilator model class.
    pub(crate) cxx: String,
    /// Rust identifier and C symbol part (`$` and other non-identifier characters become `_`).
    pub(crate) ident: String,
}

impl Port {
    pub(crate) fn words(&self) -> u32 {
        self.bits.div_ceil(32)
    }
    pub(crate) fn readable_input(&self) -> bool {
        self.dir != Dir::Out
    }
}

pub(crate) struct Model {
    pub(crate) unit: String,
    pub(crate) top: String,
    /// Verilator `--prefix`: the model class and the archive's name (`lib<prefix>.a`).
    pub(crate) prefix: String,
    pub(crate) dir: PathBuf,
    pub(crate) ports: Vec<Port>,
    pub(crate) fixture: bool,
}

impl Model {
    pub(crate) fn clock(&self) -> Option<&Port> {
        self.ports
            .iter()
            .find(|p| p.name == "clock" && p.dir == Dir::In && p.bits == 1)
    }
    pub(crate) fn sym(&self, what: &str) -> String {
        format!("opu_{}_{what}", self.unit)
    }
}

/// Non-identifier characters to `_` (a Verilator prefix, a Rust identifier, a C symbol).
pub(crate) fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Removes `// ...` and `/* ... */` comments (rust-hdl writes no strings containing them in port lists).
pub(crate) fn strip_comments(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut rest = v;
    loop {
        let line = rest.find("//");
        let block = rest.find("/*");
        match (line, block) {
            (Some(l), b) if b.is_none_or(|b| l < b) => {
                out.push_str(&rest[..l]);
                rest = rest[l..].find('\n').map_or("", |e| &rest[l + e..]);
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                out.push(' ');
                rest = rest[b..].find("*/").map_or("", |e| &rest[b + e + 2..]);
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

pub(crate) fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$'
}

/// Byte offset of the first whole-word `word` in `s` at or after `from`.
pub(crate) fn find_word(s: &str, word: &str, from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(i) = s[at..].find(word) {
        let i = at + i;
        let before = s[..i].chars().next_back().is_none_or(|c| !is_ident_char(c));
        let after = s[i + word.len()..]
            .chars()
            .next()
            .is_none_or(|c| !is_ident_char(c));
        if before && after {
            return Some(i);
        }
        at = i + word.len();
    }
    None
}

/// The ports of module `top` (non-ANSI header, as rust-hdl writes it): the names from `module top(...);`
/// in order, each with direction, width and signedness from its `input`/`output`/`inout` declaration
/// before the module's `endmodule` (declarations inside functions and tasks are not ports).
pub(crate) fn parse_ports(verilog: &str, top: &str) -> Result<Vec<Port>, String> {
    let text = strip_comments(verilog);
    let mut at = 0;
    let header_open = loop {
        let i = find_word(&text, "module", at).ok_or_else(|| format!("no `module {top}(`"))?;
        let rest = text[i + 6..].trim_start();
        if let Some(after) = rest.strip_prefix(top) {
            let after_trim = after.trim_start();
            if after_trim.starts_with('(') {
                break text.len() - after_trim.len();
            }
        }
        at = i + 6;
    };
    let header_close = header_open
        + text[header_open..]
            .find(')')
            .ok_or("unterminated module header")?;
    let names: Vec<String> = text[header_open + 1..header_close]
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(bad) = names.iter().find(|n| !n.chars().all(is_ident_char)) {
        return Err(format!(
            "header item {bad:?}: only non-ANSI headers (`module {top}(a, b);`) are supported"
        ));
    }
    let body_end = find_word(&text, "endmodule", header_close).ok_or("no endmodule")?;
    let mut body = text[header_close + 1..body_end].to_string();
    for (open, close) in [("function", "endfunction"), ("task", "endtask")] {
        while let Some(s) = find_word(&body, open, 0) {
            let e = find_word(&body, close, s).ok_or_else(|| format!("{open} without {close}"))?;
            body.replace_range(s..e + close.len(), " ");
        }
    }

    let mut decl: Vec<Option<(Dir, u32, bool)>> = vec![None; names.len()];
    for stmt in body.split(';') {
        let stmt = stmt.trim();
        let mut words = stmt.split_whitespace();
        let dir = match words.next() {
            Some("input") => Dir::In,
            Some("output") => Dir::Out,
            Some("inout") => Dir::InOut,
            _ => continue,
        };
        let rest = &stmt[stmt.find(char::is_whitespace).unwrap_or(stmt.len())..];
        let (bits, rest) = match (rest.find('['), rest.find(']')) {
            (Some(o), Some(c)) if o < c => {
                let range = &rest[o + 1..c];
                let (msb, lsb) = range
                    .split_once(':')
                    .ok_or_else(|| format!("range [{range}] in `{stmt}`"))?;
                let num = |s: &str| {
                    s.trim()
                        .parse::<i64>()
                        .map_err(|_| format!("non-numeric range [{range}] in `{stmt}`"))
                };
                let bits = (num(msb)? - num(lsb)?).unsigned_abs() + 1;
                (bits, format!("{} {}", &rest[..o], &rest[c + 1..]))
            }
            _ => (1, rest.to_string()),
        };
        let mut signed = false;
        let mut idents = Vec::new();
        for tok in rest.split(|c: char| c == ',' || c.is_whitespace()) {
            match tok {
                "" | "wire" | "reg" | "logic" | "var" | "unsigned" => {}
                "signed" => signed = true,
                name => idents.push(name),
            }
        }
        for name in idents {
            // not in the header: a declaration this parser does not know to skip; ignore it
            if let Some(k) = names.iter().position(|n| n == name) {
                if decl[k].is_some() {
                    return Err(format!("port {name} declared twice"));
                }
                let bits = u32::try_from(bits).map_err(|_| format!("port {name}: {bits} bits"))?;
                decl[k] = Some((dir, bits, signed));
            }
        }
    }
    let mut ports = Vec::with_capacity(names.len());
    for (name, d) in names.iter().zip(decl) {
        let (dir, bits, signed) =
            d.ok_or_else(|| format!("port {name} has no input/output declaration"))?;
        let mut ident = sanitize(name).to_lowercase();
        if ident.starts_with(|c: char| c.is_ascii_digit()) {
            ident.insert_str(0, "p_");
        }
        ports.push(Port {
            name: name.clone(),
            dir,
            bits,
            signed,
            cxx: String::new(),
            ident,
        });
    }
    if ports.is_empty() {
        return Err("no ports".into());
    }
    Ok(ports)
}

/// Verilator's C++ name of a Verilog identifier: characters other than `[A-Za-z0-9_]` as `__0XX` (hex).
pub(crate) fn verilator_encode(name: &str) -> String {
    let mut s = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            s.push(c);
        } else {
            let _ = write!(s, "__0{:02x}", c as u32);
        }
    }
    s
}

/// Finds each port's member in the generated model header (`VL_IN8(&name,msb,lsb);`, `VL_OUTW(&name,msb,
/// lsb,words);`, ...) and checks its width against the Verilog. C++ keywords get a `__SYM__` prefix.
pub(crate) fn map_cxx_names(m: &mut Model) -> Result<(), String> {
    let header = m.dir.join(format!("{}.h", m.prefix));
    let h =
        std::fs::read_to_string(&header).map_err(|e| format!("read {}: {e}", header.display()))?;
    let mut members = Vec::new();
    for line in h.lines() {
        let l = line.trim();
        if !(l.starts_with("VL_IN") || l.starts_with("VL_OUT")) {
            continue;
        }
        let (Some(o), Some(c)) = (l.find('('), l.rfind(')')) else {
            continue;
        };
        let f: Vec<&str> = l[o + 1..c].split(',').map(str::trim).collect();
        if f.len() < 3 {
            continue;
        }
        let msb: u32 = f[1].parse().map_err(|_| format!("header line {l:?}"))?;
        let lsb: u32 = f[2].parse().map_err(|_| format!("header line {l:?}"))?;
        members.push((
            f[0].trim_start_matches('&').to_string(),
            msb.abs_diff(lsb) + 1,
        ));
    }
    for p in &mut m.ports {
        let enc = verilator_encode(&p.name);
        let cands = [enc.clone(), format!("__SYM__{enc}")];
        let (cxx, bits) = members
            .iter()
            .find(|(n, _)| cands.contains(n))
            .ok_or_else(|| {
                format!(
                    "port {} not found in {} (members: {:?})",
                    p.name,
                    header.display(),
                    members.iter().map(|m| &m.0).collect::<Vec<_>>()
                )
            })?;
        if *bits != p.bits {
            return Err(format!(
                "port {}: {} bits in the Verilog, {bits} in {}",
                p.name,
                p.bits,
                header.display()
            ));
        }
        p.cxx = cxx.clone();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::WIDTHS_FIXTURE_V;

    #[test]
    fn fixture_ports_in_header_order_with_widths_and_signs() {
        let ports = parse_ports(WIDTHS_FIXTURE_V, "opu_widths_fixture").unwrap();
        let got: Vec<(&str, Dir, u32, bool)> =
            ports.iter().map(|p| (p.name.as_str(), p.dir, p.bits, p.signed)).collect();
        assert_eq!(got[0], ("clock", Dir::In, 1, false));
        assert_eq!(got[3], ("d$q", Dir::In, 5, false));
        assert!(got.contains(&("s13", Dir::In, 13, true)));
        assert!(got.contains(&("n300", Dir::Out, 300, true)));
        assert!(got.contains(&("count", Dir::Out, 32, false)));
        // the child module's 100-bit `a8` is not taken for the top's
        assert!(got.contains(&("a8", Dir::In, 8, false)));
        assert_eq!(ports.len(), 24);
        assert_eq!(ports.iter().find(|p| p.name == "d$q").unwrap().ident, "d_q");
        assert_eq!(ports.iter().find(|p| p.name == "n300").unwrap().words(), 10);
    }

    #[test]
    fn comments_and_missing_modules() {
        let v = "// module fake(a);\nmodule m(a, /* b, */ c);\n input wire [3:0] a; // x\n output reg c;\nendmodule\n";
        let ports = parse_ports(v, "m").unwrap();
        assert_eq!(ports.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["a", "c"]);
        assert!(parse_ports(v, "other").is_err());
        assert!(parse_ports("module m(a);\nendmodule\n", "m").is_err(), "a port without a declaration");
    }

    #[test]
    fn names_for_cxx_and_rust() {
        assert_eq!(sanitize("top$mul-x"), "top_mul_x");
        assert_eq!(verilator_encode("d$q"), "d__024q");
        assert_eq!(verilator_encode("plain_1"), "plain_1");
    }
}
