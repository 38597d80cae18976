//! A timing estimate from yosys' mapped netlist (`write_json` after `synth_xilinx -family xcup`): the
//! longest register-to-register path of each module, weighted by a per-cell delay, against the budget of the
//! core clock.
//!
//! yosys 0.23 has no static timing analysis for Xilinx parts, so this is a proxy, not STA: each mapped cell
//! on a path costs a typical UltraScale+ (-2) delay, a LUT with the net into it, a carry or wide-mux stage
//! without one (they sit in the same slice as the LUT before them). What cuts a path: flip-flops, block and
//! ultra RAMs, shift registers (their outputs are registered), DSP48E2 (every multiply of the design has a
//! register before and after it, which Vivado packs into the DSP's A/B/M/P registers; yosys leaves them in
//! fabric), module ports (a design synthesized without `-flatten` is measured module by module; rust-hdl's
//! registers are child modules, so the paths of a rust-hdl block run from its children's outputs to their
//! inputs), and the design's own ports.

use serde::Serialize;
use std::collections::HashMap;

/// Per-cell delays of the estimate (ns).
pub mod delay {
    /// A LUT (1 to 6 inputs, or a LUTRAM's asynchronous read) with the net that reaches it.
    pub const LUT: f64 = 0.45;
    /// A CARRY4 along a carry chain, 4 bits (yosys maps UltraScale+ carries as CARRY4: half a CARRY8).
    pub const CARRY: f64 = 0.06;
    /// MUXF7/F8/F9 (in the slice, after its LUTs).
    pub const MUXF: f64 = 0.10;
    /// Clock to output of the launching register plus the setup of the capturing one.
    pub const REGISTER: f64 = 0.40;
}

/// The worst path of one module.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PathReport {
    pub module: String,
    /// The estimated delay (ns), registers included.
    pub delay_ns: f64,
    pub luts: u32,
    pub carries: u32,
    pub muxes: u32,
    /// The net the path starts from and the net it ends at (the closest named nets, as yosys keeps them).
    pub from: String,
    pub to: String,
}

impl PathReport {
    /// The highest clock (MHz) the estimate allows.
    pub fn fmax_mhz(&self) -> f64 {
        1e3 / self.delay_ns
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Lut,
    Carry,
    Mux,
    /// Wiring-only cells (INV is absorbed into the LUT it feeds; buffers of the design's ports).
    Free,
}

fn kind(cell_type: &str) -> Option<Kind> {
    let lutram = ["RAM32", "RAM64", "RAM128", "RAM256", "RAM512"].iter().any(|p| cell_type.starts_with(p));
    if cell_type.starts_with("LUT") || lutram {
        Some(Kind::Lut)
    } else if cell_type.starts_with("CARRY") {
        Some(Kind::Carry)
    } else if cell_type.starts_with("MUXF") {
        Some(Kind::Mux)
    } else if cell_type == "INV" {
        Some(Kind::Free)
    } else {
        // FD*, SRL*, RAMB*, URAM288, DSP48E2, IBUF/OBUF/BUFG and submodules: path boundaries
        None
    }
}

fn cost(k: Kind) -> f64 {
    match k {
        Kind::Lut => delay::LUT,
        Kind::Carry => delay::CARRY,
        Kind::Mux => delay::MUXF,
        Kind::Free => 0.0,
    }
}

struct Cell {
    kind: Kind,
    inputs: Vec<u64>,
    outputs: Vec<u64>,
}

/// The worst path of every module of a yosys JSON netlist (`write_json`), worst first.
pub fn worst_paths(netlist: &serde_json::Value) -> Result<Vec<PathReport>, String> {
    let modules = netlist["modules"].as_object().ok_or("the netlist has no `modules`")?;
    let mut out = Vec::new();
    for (name, m) in modules {
        // blackboxes of the cell library carry no cells; skip modules without any
        let Some(cells) = m["cells"].as_object() else { continue };
        if m["attributes"]["blackbox"].is_string() || cells.is_empty() {
            continue;
        }
        if let Some(p) = module_worst_path(name, m)? {
            out.push(p);
        }
    }
    out.sort_by(|a, b| b.delay_ns.total_cmp(&a.delay_ns).then_with(|| a.module.cmp(&b.module)));
    Ok(out)
}

fn bits(v: &serde_json::Value) -> impl Iterator<Item = u64> + '_ {
    // constants ("0", "1", "x") are strings: never a path
    v.as_array().into_iter().flatten().filter_map(|b| b.as_u64())
}

fn module_worst_path(name: &str, m: &serde_json::Value) -> Result<Option<PathReport>, String> {
    let mut cells = Vec::new();
    // a flip-flop's D bit -> its Q bit, to name a path's end by the register it reaches
    let mut d_to_q: HashMap<u64, u64> = HashMap::new();
    for (cname, c) in m["cells"].as_object().into_iter().flatten() {
        let ty = c["type"].as_str().unwrap_or("");
        if ty.starts_with("FD") {
            if let (Some(d), Some(q)) = (bits(&c["connections"]["D"]).next(), bits(&c["connections"]["Q"]).next()) {
                d_to_q.insert(d, q);
            }
        }
        let Some(k) = kind(ty) else { continue };
        let dirs = c["port_directions"].as_object().ok_or_else(|| format!("{name}: cell {cname} ({ty}) has no port directions"))?;
        let (mut inputs, mut outputs) = (Vec::new(), Vec::new());
        for (port, conn) in c["connections"].as_object().into_iter().flatten() {
            match dirs.get(port).and_then(|d| d.as_str()) {
                Some("input") => inputs.extend(bits(conn)),
                Some("output") => outputs.extend(bits(conn)),
                _ => {}
            }
        }
        cells.push(Cell { kind: k, inputs, outputs });
    }
    if cells.is_empty() {
        return Ok(None);
    }
    let mut driver: HashMap<u64, usize> = HashMap::new();
    for (i, c) in cells.iter().enumerate() {
        for &b in &c.outputs {
            driver.insert(b, i);
        }
    }
    // the latest arrival at each cell's outputs, by an iterative depth-first search (carry chains are long)
    const UNSEEN: f64 = -1.0;
    const ON_STACK: f64 = -2.0;
    let mut arrival = vec![UNSEEN; cells.len()];
    let mut pred: Vec<Option<usize>> = vec![None; cells.len()];
    let mut start_bit: Vec<u64> = vec![0; cells.len()];
    for root in 0..cells.len() {
        if arrival[root] != UNSEEN {
            continue;
        }
        let mut stack = vec![(root, 0usize)];
        arrival[root] = ON_STACK;
        while let Some(&mut (i, ref mut next)) = stack.last_mut() {
            if let Some(&b) = cells[i].inputs.get(*next) {
                *next += 1;
                if let Some(&d) = driver.get(&b) {
                    if arrival[d] == UNSEEN {
                        arrival[d] = ON_STACK;
                        stack.push((d, 0));
                    }
                    // a cell still on the stack closes a loop: the edge is left out. Cells are modelled every
                    // input to every output, so a CARRY4 whose low sum feeds its own high bits makes a loop
                    // that the hardware does not have (yosys' `check` reports real ones).
                }
                continue;
            }
            // all inputs known: the latest of them (a path starts at an input no cell here drives)
            let (mut best, mut best_pred, mut boundary) = (0.0f64, None, None);
            for &b in &cells[i].inputs {
                // (a driver still on the stack is a cut loop: not a predecessor)
                match driver.get(&b).filter(|&&d| arrival[d] >= 0.0) {
                    Some(&d) if best_pred.is_none() || arrival[d] > best => (best, best_pred) = (arrival[d], Some(d)),
                    Some(_) => {}
                    None => boundary = boundary.or(Some(b)),
                }
            }
            arrival[i] = best + cost(cells[i].kind);
            pred[i] = best_pred;
            start_bit[i] = best_pred.map_or(boundary.unwrap_or(0), |p| start_bit[p]);
            stack.pop();
        }
    }
    let (end, &worst) = arrival.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).expect("cells is not empty");
    let (mut luts, mut carries, mut muxes) = (0, 0, 0);
    let mut i = Some(end);
    while let Some(c) = i {
        match cells[c].kind {
            Kind::Lut => luts += 1,
            Kind::Carry => carries += 1,
            Kind::Mux => muxes += 1,
            Kind::Free => {}
        }
        i = pred[c];
    }
    let names = net_names(m);
    let name_of = |b: u64| names.get(&b).map_or_else(|| format!("bit {b}"), |n| n.1.clone());
    // the end: the register the cell's output reaches, else the output with the most readable name
    let readable = |b: &u64| names.get(b).map_or(2, |n| u8::from(n.0));
    let to = cells[end].outputs.iter().map(|b| d_to_q.get(b).copied().unwrap_or(*b)).min_by_key(readable);
    Ok(Some(PathReport {
        module: name.trim_start_matches('\\').to_string(),
        delay_ns: worst + delay::REGISTER,
        luts,
        carries,
        muxes,
        from: name_of(start_bit[end]),
        to: to.map_or_else(String::new, name_of),
    }))
}

/// A readable name per net bit, with whether yosys hides it: a name the design gave it (yosys' hidden `$...`
/// names only where there is no other), with the bit index.
fn net_names(m: &serde_json::Value) -> HashMap<u64, (bool, String)> {
    let mut names: HashMap<u64, (bool, String)> = HashMap::new();
    for (n, net) in m["netnames"].as_object().into_iter().flatten() {
        let hidden = net["hide_name"].as_u64() == Some(1);
        let arr = net["bits"].as_array().cloned().unwrap_or_default();
        let width = arr.len();
        for (idx, b) in arr.iter().enumerate() {
            let Some(b) = b.as_u64() else { continue };
            let label = if width > 1 { format!("{n}[{idx}]") } else { n.clone() };
            match names.get(&b) {
                Some((false, _)) if hidden => {}
                Some((h, old)) if *h == hidden && old.len() <= label.len() => {}
                _ => {
                    names.insert(b, (hidden, label));
                }
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lut(inputs: &[u64], out: u64) -> serde_json::Value {
        let mut conn = serde_json::Map::new();
        let mut dirs = serde_json::Map::new();
        for (k, b) in inputs.iter().enumerate() {
            conn.insert(format!("I{k}"), json!([b]));
            dirs.insert(format!("I{k}"), json!("input"));
        }
        conn.insert("O".into(), json!([out]));
        dirs.insert("O".into(), json!("output"));
        json!({"type": format!("LUT{}", inputs.len()), "port_directions": dirs, "connections": conn})
    }

    #[test]
    fn the_longest_chain_between_registers_wins() {
        // q (bit 2, a register's output) -> LUT -> LUT -> CARRY4 -> d; a second path of one LUT
        let netlist = json!({"modules": {"m": {
            "cells": {
                "r": {"type": "FDRE", "port_directions": {"D": "input", "Q": "output", "C": "input"}, "connections": {"D": [9], "Q": [2], "C": [1]}},
                "a": lut(&[2, 3], 4),
                "b": lut(&[4], 5),
                "c": {"type": "CARRY4", "port_directions": {"CI": "input", "S": "input", "CO": "output", "O": "output"},
                      "connections": {"CI": ["0"], "S": [5, 5, 5, 5], "CO": [6, 7, 8, 10], "O": [11, 12, 13, 14]}},
                "d": lut(&[3], 15),
            },
            "netnames": {"q": {"hide_name": 0, "bits": [2]}, "sum": {"hide_name": 0, "bits": [11, 12, 13, 14]}, "$x": {"hide_name": 1, "bits": [4]}},
        }}});
        let p = worst_paths(&netlist).unwrap();
        assert_eq!(p.len(), 1);
        let p = &p[0];
        assert_eq!((p.luts, p.carries, p.muxes), (2, 1, 0));
        assert!((p.delay_ns - (2.0 * delay::LUT + delay::CARRY + delay::REGISTER)).abs() < 1e-9, "{}", p.delay_ns);
        assert_eq!(p.from, "q");
        assert!(p.to.starts_with("sum"), "{}", p.to);
    }

    #[test]
    fn a_loop_is_cut_not_followed_forever() {
        let netlist = json!({"modules": {"m": {"cells": {"a": lut(&[2, 9], 3), "b": lut(&[3], 2)}, "netnames": {}}}});
        let p = worst_paths(&netlist).unwrap();
        assert_eq!(p[0].luts, 2, "{p:?}");
    }
}
