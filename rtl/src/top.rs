//! The overlay's top so far (unit `top`, rust-hdl HDL): the register file, the controller core, the DMA
//! unit, the matrix unit (`matmul`), the vector unit (`vop rmsnorm rope argmax`) and the attention unit
//! (`attn`, `kvappend`, the KV history buffer, and `route` on its router datapath), each behind its issue
//! queue, and the 8-bank scratchpad, on device memory (a line port and a weight port). It runs programs of control, scalar, DMA,
//! `matmul`, vector and attention instructions, and `RED` (`red::RedFile`) between the matrix unit's fused
//! reduction and the vector unit; and the CNN unit (`conv`, `maxpool`), issued on the matrix unit's port and
//! run alone.
//!
//! The units exchange data through the scratchpad and device memory, so the core issues to one of them only
//! while the others are idle with empty queues (instructions for the same unit queue up behind each other):
//! the interlock docs/isa.md asks for, at the granularity of units. One exception keeps the weight stream
//! going: a `matmul` is issued while the vector or the attention unit still works through the instructions
//! before it (with the DMA unit idle and no `kvappend` queued or running, since those write device memory).
//! The matrix unit checks it and its loader fills the weight ring meanwhile; its compute, which reads and
//! writes the scratchpad and RED, waits until the others are idle (`go`). Nothing more is issued until it is
//! done. If an instruction before it traps, the `matmul` is dropped (it has only read weights).
//!
//! Memory: a line port, one request per cycle (32-byte lines; reads answered in order with the request's
//! `m_tag` echoed in `m_resp_tag`: 0 for instruction fetch, 1 for the DMA unit, 3 for the attention unit;
//! the units have priority, fetch takes the cycles they leave), and a weight port for the matrix unit's
//! loader (`W` 64-byte beats a request, `W = OverlayConfig::weight_port_beats`, in the cycles the line port
//! leaves: the memory moves `W` beats or one line per cycle, the config's `64 W` bytes per cycle: 1 beat at
//! `sim`, 2 at `sim-wide`, 32 at `u280`). `ldr` reads the scratchpad through its read
//! port, which is free then (the core issues `ldr` only when the units are idle).

use crate::ctrl::core::Core;
use crate::ctrl::mmio::{Mmio, ADDR_BITS};
use crate::ctrl::queue::{IssueQueue, AUX_BITS};
use crate::dma::Dma;
use crate::matrix::Matrix;
use crate::spm::ScratchpadInstance;
use crate::red::RedFile;
use crate::attn::AttentionUnit;
use crate::cnn::Cnn;
use crate::vecunit::VectorUnit;
use opu_hw::OverlayConfig;
use rust_hdl::prelude::*;

#[derive(LogicBlock)]
pub struct Top<const WB: usize> {
    pub clock: Signal<In, Clock>,
    pub reset: Signal<In, Bit>,

    // ---- host (BAR 0)
    pub mmio_addr: Signal<In, Bits<ADDR_BITS>>,
    pub mmio_wdata: Signal<In, Bits<32>>,
    pub mmio_write: Signal<In, Bit>,
    pub mmio_read: Signal<In, Bit>,
    pub mmio_rdata: Signal<Out, Bits<32>>,
    pub mmio_rvalid: Signal<Out, Bit>,
    pub irq: Signal<Out, Bit>,

    // ---- device memory
    pub m_req: Signal<Out, Bit>,
    pub m_req_ready: Signal<In, Bit>,
    pub m_write: Signal<Out, Bit>,
    pub m_addr: Signal<Out, Bits<64>>,
    pub m_wdata: Signal<Out, Bits<256>>,
    pub m_wmask: Signal<Out, Bits<32>>,
    pub m_tag: Signal<Out, Bits<2>>,
    pub m_resp: Signal<In, Bit>,
    pub m_rdata: Signal<In, Bits<256>>,
    pub m_resp_tag: Signal<In, Bits<2>>,
    // ---- device memory, the weight port: the matrix unit's loader, reads of `W` 64-byte beats at once
    // (`W = WB / 512 = OverlayConfig::weight_port_beats`; `w_addr` in beats, a multiple of `W`; beat `j` at
    // bits `512 j ..`), answered in order. The memory serves one such request or one line per cycle: a
    // request waits while the line port requests
    pub w_req: Signal<Out, Bit>,
    pub w_req_ready: Signal<In, Bit>,
    pub w_addr: Signal<Out, Bits<64>>,
    pub w_resp: Signal<In, Bit>,
    pub w_rdata: Signal<In, Bits<WB>>,

    mmio: Mmio,
    core: Core,
    /// The DMA unit's issue queue: the core runs ahead of a busy DMA unit.
    dma_q: IssueQueue,
    dma: Dma,
    mat_q: IssueQueue,
    mat: Matrix<WB>,
    vec_q: IssueQueue,
    vec: VectorUnit,
    /// `RED`: the matrix unit's while it runs, else the vector unit's.
    red: RedFile,
    att_q: IssueQueue,
    att: AttentionUnit,
    /// The CNN unit (`conv`, `maxpool`), issued on the matrix unit's port (the contract's unit) and
    /// queued apart.
    cnn_q: IssueQueue,
    cnn: Cnn,
    cnn_side_idle: Signal<Local, Bit>,
    cnn_turn: Signal<Local, Bit>,
    /// The instruction on the matrix unit's issue port is a `conv` or `maxpool`.
    cnn_op: Signal<Local, Bit>,
    /// The DMA, matrix, vector and attention sides are idle.
    four_idle: Signal<Local, Bit>,
    op_conv: Constant<Bits<8>>,
    op_maxpool: Constant<Bits<8>>,
    conv_h: Constant<Bits<16>>,
    /// The seven conv CSRs (`conv_h` .. `conv_pad`) of the issued instruction.
    conv_csrs: Signal<Local, Bits<224>>,
    /// The scratchpad (8 banks of words behind a line port, as deep as the config's).
    spm: ScratchpadInstance,
    dma_turn: Signal<Local, Bit>,
    line_req: Signal<Local, Bit>,
    att_turn: Signal<Local, Bit>,
    att_side_idle: Signal<Local, Bit>,
    dma_side_idle: Signal<Local, Bit>,
    mat_side_idle: Signal<Local, Bit>,
    vec_side_idle: Signal<Local, Bit>,
    /// A unit reports a trap this cycle: nothing is issued (the core stops issuing from the next cycle).
    any_trap: Signal<Local, Bit>,
    /// A unit other than the matrix unit reports a trap: an early `matmul` (after that instruction) is dropped.
    other_trap: Signal<Local, Bit>,
    /// `kvappend`s in the attention unit's queue; a `matmul` is issued early only when none is pending.
    kv_queued: DFF<Bits<3>>,
    kv_push: Signal<Local, Bit>,
    kv_pop: Signal<Local, Bit>,
    early_ok: Signal<Local, Bit>,
    /// The other units are idle (the matrix unit's `go`): it owns the scratchpad and RED.
    mat_go: Signal<Local, Bit>,
    op_kvappend: Constant<Bits<8>>,
    vscale: Constant<Bits<16>>,
    kv_index: Constant<Bits<16>>,
    attn_heads: Constant<Bits<16>>,
}

impl<const WB: usize> Top<WB> {
    /// `dp_cores`, `vec_cores`: the Verilog under the matrix unit's and the vector unit's datapaths
    /// (`matrix::dp_cores`, `vecunit::dp_cores`).
    /// `dp_cores`, `vec_cores`: as above; `spm`: the config's scratchpad.
    pub fn new(config: &OverlayConfig, dp_cores: String, vec_cores: String, spm: ScratchpadInstance) -> Self {
        Top {
            clock: Default::default(),
            reset: Default::default(),
            mmio_addr: Default::default(),
            mmio_wdata: Default::default(),
            mmio_write: Default::default(),
            mmio_read: Default::default(),
            mmio_rdata: Default::default(),
            mmio_rvalid: Default::default(),
            irq: Default::default(),
            m_req: Default::default(),
            m_req_ready: Default::default(),
            m_write: Default::default(),
            m_addr: Default::default(),
            m_wdata: Default::default(),
            m_wmask: Default::default(),
            m_tag: Default::default(),
            m_resp: Default::default(),
            m_rdata: Default::default(),
            m_resp_tag: Default::default(),
            w_req: Default::default(),
            w_req_ready: Default::default(),
            w_addr: Default::default(),
            w_resp: Default::default(),
            w_rdata: Default::default(),
            mmio: Mmio::new(config),
            core: Core::new(config),
            dma_q: Default::default(),
            dma: Dma::new(config),
            mat_q: Default::default(),
            mat: Matrix::new(config, dp_cores),
            vec_q: Default::default(),
            vec: VectorUnit::new(config, vec_cores),
            red: Default::default(),
            att_q: Default::default(),
            att: AttentionUnit::new(config),
            cnn_q: Default::default(),
            cnn: Cnn::new(config, crate::cnn::dp::dp_verilog(config)),
            cnn_side_idle: Default::default(),
            cnn_turn: Default::default(),
            cnn_op: Default::default(),
            four_idle: Default::default(),
            op_conv: crate::ctrl::constant(u64::from(crate::ctrl::decode::opcode("conv"))),
            op_maxpool: crate::ctrl::constant(u64::from(crate::ctrl::decode::opcode("maxpool"))),
            conv_h: crate::ctrl::constant(u64::from(opu_hw::isa::Csr::ConvH as u8) * 32),
            conv_csrs: Default::default(),
            spm,
            dma_turn: Default::default(),
            line_req: Default::default(),
            att_turn: Default::default(),
            att_side_idle: Default::default(),
            dma_side_idle: Default::default(),
            mat_side_idle: Default::default(),
            vec_side_idle: Default::default(),
            any_trap: Default::default(),
            other_trap: Default::default(),
            kv_queued: Default::default(),
            kv_push: Default::default(),
            kv_pop: Default::default(),
            early_ok: Default::default(),
            mat_go: Default::default(),
            op_kvappend: crate::ctrl::constant(u64::from(crate::ctrl::decode::opcode("kvappend"))),
            vscale: crate::ctrl::constant(u64::from(opu_hw::isa::Csr::VScale as u8) * 32),
            kv_index: crate::ctrl::constant(u64::from(opu_hw::isa::Csr::KvIndex as u8) * 32),
            attn_heads: crate::ctrl::constant(u64::from(opu_hw::isa::Csr::AttnHeads as u8) * 32),
        }
    }
}

impl<const WB: usize> Logic for Top<WB> {
    #[hdl_gen]
    fn update(&mut self) {
        dff_setup!(self, clock, kv_queued);
        self.mmio.clock.next = self.clock.val();
        self.core.clock.next = self.clock.val();
        self.dma.clock.next = self.clock.val();
        self.dma_q.clock.next = self.clock.val();
        self.mat_q.clock.next = self.clock.val();
        self.mat.clock.next = self.clock.val();
        self.mat.reset.next = self.reset.val();
        self.vec_q.clock.next = self.clock.val();
        self.vec.clock.next = self.clock.val();
        self.vec.reset.next = self.reset.val();
        self.att_q.clock.next = self.clock.val();
        self.att.clock.next = self.clock.val();
        self.att.reset.next = self.reset.val();
        self.cnn_q.clock.next = self.clock.val();
        self.cnn.clock.next = self.clock.val();
        self.cnn.reset.next = self.reset.val();
        self.red.clock.next = self.clock.val();
        self.red.clear.next = self.mmio.start.val() & !self.core.busy.val();
        self.mmio.reset.next = self.reset.val();
        self.core.reset.next = self.reset.val();
        self.dma.reset.next = self.reset.val();

        // ---- host <-> register file <-> core
        self.mmio.addr.next = self.mmio_addr.val();
        self.mmio.wdata.next = self.mmio_wdata.val();
        self.mmio.write.next = self.mmio_write.val();
        self.mmio.read.next = self.mmio_read.val();
        self.mmio_rdata.next = self.mmio.rdata.val();
        self.mmio_rvalid.next = self.mmio.rvalid.val();
        self.irq.next = self.mmio.irq.val();
        self.core.start.next = self.mmio.start.val();
        self.core.soft_reset.next = self.mmio.soft_reset.val();
        self.core.prog_base.next = self.mmio.prog_base.val();
        self.core.prog_len.next = self.mmio.prog_len.val();
        self.core.args.next = self.mmio.args.val();
        self.core.watchdog.next = self.mmio.watchdog.val();
        self.mmio.busy.next = self.core.busy.val();
        self.mmio.fin.next = self.core.fin.val();
        self.mmio.fin_error.next = self.core.fin_error.val();
        self.mmio.err_code.next = self.core.err_code.val();
        self.mmio.err_pc.next = self.core.err_pc.val();
        self.mmio.err_info.next = self.core.err_info.val();
        self.mmio.cycles.next = self.core.cycles.val();
        self.mmio.instret.next = self.core.instret.val();
        self.mmio.bytes_read.next = self.dma.bytes_read.val() + self.mat.bytes_read.val() + self.att.bytes_read.val() + self.cnn.bytes_read.val();
        self.mmio.bytes_written.next = self.dma.bytes_written.val() + self.att.bytes_written.val();
        self.mmio.macs.next = self.mat.macs.val() + self.att.macs.val() + self.cnn.macs.val();
        self.mmio.stall_cycles.next = 0.into();
        self.mmio.skipped_blocks.next = self.att.skipped.val();
        self.mmio.kv_history_hits.next = self.att.hits.val();
        self.mmio.kv_history_misses.next = self.att.misses.val();
        self.mmio.dbg_rf.next = self.core.dbg_rf.val();
        self.mmio.dbg_preds.next = self.core.dbg_preds.val();
        self.mmio.dbg_csrs.next = self.core.dbg_csrs.val();

        // ---- issue: bit 0 the DMA unit, bit 1 the matrix unit, bit 2 the vector unit, bit 3 the attention
        // unit, each through its queue, one side at a time
        self.dma_side_idle.next = self.dma_q.empty.val() & self.dma.idle.val();
        self.mat_side_idle.next = self.mat_q.empty.val() & self.mat.idle.val();
        self.vec_side_idle.next = self.vec_q.empty.val() & self.vec.idle.val();
        self.att_side_idle.next = self.att_q.empty.val() & self.att.idle.val();
        self.cnn_side_idle.next = self.cnn_q.empty.val() & self.cnn.idle.val();
        self.four_idle.next = self.dma_side_idle.val() & self.mat_side_idle.val() & self.vec_side_idle.val() & self.att_side_idle.val();
        self.cnn_op.next = (self.core.iss_word.val().get_bits::<8>(0) == self.op_conv.val())
            | (self.core.iss_word.val().get_bits::<8>(0) == self.op_maxpool.val());
        // busy cycles per unit (ExecUnit order): an instruction running or queued
        // (the inversion on the whole vector: Verilog widens a 1-bit operand before `~`)
        self.mmio.unit_busy.next = !(bit_cast::<4, 1>(self.dma_side_idle.val().into())
            | (bit_cast::<4, 1>((self.mat_side_idle.val() & self.cnn_side_idle.val()).into()) << 1)
            | (bit_cast::<4, 1>(self.vec_side_idle.val().into()) << 2)
            | (bit_cast::<4, 1>(self.att_side_idle.val().into()) << 3));
        self.other_trap.next = self.dma.trap_valid.val() | self.vec.trap_valid.val() | self.att.trap_valid.val() | self.cnn.trap_valid.val();
        self.any_trap.next = self.other_trap.val() | self.mat.trap_valid.val();
        // A `matmul` is issued early, while the vector or the attention unit still works through the
        // instructions before it: its loader streams its first groups meanwhile, and its compute waits for
        // `go`. Not while the DMA unit works (it shares the scratchpad port and writes device memory), nor
        // while a `kvappend` is queued or runs (a device-memory write that the weights might overlap).
        self.early_ok.next = self.dma_side_idle.val() & (self.kv_queued.q.val() == 0) & !self.att.kv_writing.val();
        // (not in the cycle another unit's trap flushes the matrix unit: that unit is idle then)
        self.mat_go.next = self.dma_side_idle.val() & self.vec_side_idle.val() & self.att_side_idle.val() & self.cnn_side_idle.val() & !self.other_trap.val();
        self.mat.go.next = self.mat_go.val();
        self.dma_q.push.next = self.core.iss_valid.val().get_bit(0) & self.mat_side_idle.val() & self.vec_side_idle.val() & self.att_side_idle.val() & self.cnn_side_idle.val() & !self.any_trap.val();
        self.dma_q.push_word.next = self.core.iss_word.val();
        self.dma_q.push_pc.next = self.core.iss_pc.val();
        self.dma_q.push_reg.next = self.core.iss_reg.val();
        self.dma_q.push_aux.next = 0.into();
        self.mat_q.push.next = self.core.iss_valid.val().get_bit(1) & !self.cnn_op.val() & self.early_ok.val() & !self.any_trap.val();
        self.mat_q.push_word.next = self.core.iss_word.val();
        self.mat_q.push_pc.next = self.core.iss_pc.val();
        self.mat_q.push_reg.next = self.core.iss_reg.val();
        self.mat_q.push_aux.next = 0.into();
        self.vec_q.push.next = self.core.iss_valid.val().get_bit(2) & self.dma_side_idle.val() & self.mat_side_idle.val() & self.att_side_idle.val() & self.cnn_side_idle.val() & !self.any_trap.val();
        self.vec_q.push_word.next = self.core.iss_word.val();
        self.vec_q.push_pc.next = self.core.iss_pc.val();
        self.vec_q.push_reg.next = self.core.iss_reg.val();
        // the vector unit reads the `vscale` CSR (the core's snapshot at issue)
        self.vec_q.push_aux.next = bit_cast::<AUX_BITS, 32>(self.core.iss_csr.val().get_bits::<32>(self.vscale.val().index()));
        self.att_q.push.next = self.core.iss_valid.val().get_bit(3) & self.dma_side_idle.val() & self.mat_side_idle.val() & self.vec_side_idle.val() & self.cnn_side_idle.val() & !self.any_trap.val();
        // `conv` and `maxpool` come on the matrix unit's port; they run alone, with their shape CSRs (the
        // core's snapshot at issue): each CSR's low 16 bits and whether it is 2^16 or more
        self.cnn_q.push.next = self.core.iss_valid.val().get_bit(1) & self.cnn_op.val() & self.four_idle.val() & !self.any_trap.val();
        self.cnn_q.push_word.next = self.core.iss_word.val();
        self.cnn_q.push_pc.next = self.core.iss_pc.val();
        self.cnn_q.push_reg.next = self.core.iss_reg.val();
        self.conv_csrs.next = self.core.iss_csr.val().get_bits::<224>(self.conv_h.val().index());
        self.cnn_q.push_aux.next = bit_cast::<AUX_BITS, 16>(self.conv_csrs.val().get_bits::<16>(0))
            | (bit_cast::<AUX_BITS, 1>((self.conv_csrs.val().get_bits::<16>(16) != 0).into()) << 16)
            | (bit_cast::<AUX_BITS, 16>(self.conv_csrs.val().get_bits::<16>(32)) << 17)
            | (bit_cast::<AUX_BITS, 1>((self.conv_csrs.val().get_bits::<16>(48) != 0).into()) << 33)
            | (bit_cast::<AUX_BITS, 16>(self.conv_csrs.val().get_bits::<16>(64)) << 34)
            | (bit_cast::<AUX_BITS, 1>((self.conv_csrs.val().get_bits::<16>(80) != 0).into()) << 50)
            | (bit_cast::<AUX_BITS, 16>(self.conv_csrs.val().get_bits::<16>(96)) << 51)
            | (bit_cast::<AUX_BITS, 1>((self.conv_csrs.val().get_bits::<16>(112) != 0).into()) << 67)
            | (bit_cast::<AUX_BITS, 16>(self.conv_csrs.val().get_bits::<16>(128)) << 68)
            | (bit_cast::<AUX_BITS, 1>((self.conv_csrs.val().get_bits::<16>(144) != 0).into()) << 84)
            | (bit_cast::<AUX_BITS, 16>(self.conv_csrs.val().get_bits::<16>(160)) << 85)
            | (bit_cast::<AUX_BITS, 1>((self.conv_csrs.val().get_bits::<16>(176) != 0).into()) << 101)
            | (bit_cast::<AUX_BITS, 16>(self.conv_csrs.val().get_bits::<16>(192)) << 102)
            | (bit_cast::<AUX_BITS, 1>((self.conv_csrs.val().get_bits::<16>(208) != 0).into()) << 118);
        self.att_q.push_word.next = self.core.iss_word.val();
        self.att_q.push_pc.next = self.core.iss_pc.val();
        self.att_q.push_reg.next = self.core.iss_reg.val();
        // the attention unit reads the CSRs head_dim, kv_stride, attn_scale, kv_present (codes 0..4) and
        // kv_index (bits 128..160)
        self.att_q.push_aux.next = bit_cast::<AUX_BITS, 128>(self.core.iss_csr.val().get_bits::<128>(0))
            | (bit_cast::<AUX_BITS, 32>(self.core.iss_csr.val().get_bits::<32>(self.kv_index.val().index())) << 128)
            | (bit_cast::<AUX_BITS, 32>(self.core.iss_csr.val().get_bits::<32>(self.attn_heads.val().index())) << 160);
        self.core.iss_ready.next = bit_cast::<4, 1>((self.dma_q.push_ready.val() & self.mat_side_idle.val() & self.vec_side_idle.val() & self.att_side_idle.val() & self.cnn_side_idle.val() & !self.any_trap.val()).into())
            | (bit_cast::<4, 1>(((self.mat_q.push_ready.val() & !self.cnn_op.val() & self.early_ok.val() & !self.any_trap.val())
                | (self.cnn_q.push_ready.val() & self.cnn_op.val() & self.four_idle.val() & !self.any_trap.val())).into()) << 1)
            | (bit_cast::<4, 1>((self.vec_q.push_ready.val() & self.dma_side_idle.val() & self.mat_side_idle.val() & self.att_side_idle.val() & self.cnn_side_idle.val() & !self.any_trap.val()).into()) << 2)
            | (bit_cast::<4, 1>((self.att_q.push_ready.val() & self.dma_side_idle.val() & self.mat_side_idle.val() & self.vec_side_idle.val() & self.cnn_side_idle.val() & !self.any_trap.val()).into()) << 3);
        // a unit takes the head when idle; after its trap the queued instructions are dropped
        self.dma.iss_valid.next = self.dma_q.pop_valid.val() & !self.dma.trap_valid.val();
        self.dma.iss_word.next = self.dma_q.pop_word.val();
        self.dma.iss_pc.next = self.dma_q.pop_pc.val();
        self.dma.iss_reg.next = self.dma_q.pop_reg.val();
        self.dma_q.pop.next = self.dma.iss_ready.val() & !self.dma.trap_valid.val();
        self.dma_q.flush.next = self.core.flush.val() | self.dma.trap_valid.val();
        self.mat.iss_valid.next = self.mat_q.pop_valid.val() & !self.mat.trap_valid.val();
        self.mat.iss_word.next = self.mat_q.pop_word.val();
        self.mat.iss_pc.next = self.mat_q.pop_pc.val();
        self.mat_q.pop.next = self.mat.iss_ready.val() & self.mat_q.pop_valid.val() & !self.mat.trap_valid.val();
        self.mat_q.flush.next = self.core.flush.val() | self.mat.trap_valid.val() | self.other_trap.val();
        self.vec.iss_valid.next = self.vec_q.pop_valid.val() & !self.vec.trap_valid.val();
        self.vec.iss_word.next = self.vec_q.pop_word.val();
        self.vec.iss_pc.next = self.vec_q.pop_pc.val();
        self.vec.iss_aux.next = self.vec_q.pop_aux.val().get_bits::<128>(0);
        self.vec_q.pop.next = self.vec.iss_ready.val() & self.vec_q.pop_valid.val() & !self.vec.trap_valid.val();
        self.vec_q.flush.next = self.core.flush.val() | self.vec.trap_valid.val();
        self.att.iss_valid.next = self.att_q.pop_valid.val() & !self.att.trap_valid.val();
        self.att.iss_word.next = self.att_q.pop_word.val();
        self.att.iss_pc.next = self.att_q.pop_pc.val();
        self.att.iss_reg.next = self.att_q.pop_reg.val();
        self.att.iss_aux.next = self.att_q.pop_aux.val();
        self.att_q.pop.next = self.att.iss_ready.val() & self.att_q.pop_valid.val() & !self.att.trap_valid.val();
        self.att_q.flush.next = self.core.flush.val() | self.att.trap_valid.val();
        self.cnn.iss_valid.next = self.cnn_q.pop_valid.val() & !self.cnn.trap_valid.val();
        self.cnn.iss_word.next = self.cnn_q.pop_word.val();
        self.cnn.iss_pc.next = self.cnn_q.pop_pc.val();
        self.cnn.iss_aux.next = self.cnn_q.pop_aux.val();
        self.cnn_q.pop.next = self.cnn.iss_ready.val() & self.cnn_q.pop_valid.val() & !self.cnn.trap_valid.val();
        self.cnn_q.flush.next = self.core.flush.val() | self.cnn.trap_valid.val();
        self.cnn.flush.next = self.core.flush.val();
        // `kvappend`s in the attention unit's queue (after the queue's push, pop and flush above: read back
        // within this block, they must be assigned first)
        // (a push counts when the queue takes it: the core holds a `kvappend` on the port while the queue is full)
        self.kv_push.next = self.att_q.push.val() & self.att_q.push_ready.val() & (self.core.iss_word.val().get_bits::<8>(0) == self.op_kvappend.val());
        self.kv_pop.next = self.att_q.pop.val() & (self.att_q.pop_word.val().get_bits::<8>(0) == self.op_kvappend.val());
        if self.kv_push.val() & !self.kv_pop.val() {
            self.kv_queued.d.next = self.kv_queued.q.val() + 1;
        }
        if !self.kv_push.val() & self.kv_pop.val() {
            self.kv_queued.d.next = self.kv_queued.q.val() - 1;
        }
        if self.att_q.flush.val() | self.reset.val() | (self.mmio.start.val() & !self.core.busy.val()) {
            self.kv_queued.d.next = 0.into();
        }
        self.att.flush.next = self.core.flush.val();
        self.core.units_idle.next = self.four_idle.val() & self.cnn_side_idle.val();
        self.core.progress.next = self.dma.progress.val() | self.mat.progress.val() | self.vec.progress.val() | self.att.progress.val() | self.cnn.progress.val();
        self.dma.flush.next = self.core.flush.val();
        self.mat.flush.next = self.core.flush.val() | self.other_trap.val();
        self.vec.flush.next = self.core.flush.val();
        // one side runs at a time, except an early `matmul`'s beside the instructions before it: the core
        // keeps the trap with the lowest pc, and those come first here
        self.core.utrap_valid.next = self.any_trap.val();
        self.core.utrap_code.next = self.dma.trap_code.val();
        self.core.utrap_pc.next = self.dma.trap_pc.val();
        self.core.utrap_info.next = self.dma.trap_info.val();
        if self.mat.trap_valid.val() {
            self.core.utrap_code.next = self.mat.trap_code.val();
            self.core.utrap_pc.next = self.mat.trap_pc.val();
            self.core.utrap_info.next = self.mat.trap_info.val();
        }
        if self.vec.trap_valid.val() {
            self.core.utrap_code.next = self.vec.trap_code.val();
            self.core.utrap_pc.next = self.vec.trap_pc.val();
            self.core.utrap_info.next = self.vec.trap_info.val();
        }
        if self.att.trap_valid.val() {
            self.core.utrap_code.next = self.att.trap_code.val();
            self.core.utrap_pc.next = self.att.trap_pc.val();
            self.core.utrap_info.next = self.att.trap_info.val();
        }
        if self.cnn.trap_valid.val() {
            self.core.utrap_code.next = self.cnn.trap_code.val();
            self.core.utrap_pc.next = self.cnn.trap_pc.val();
            self.core.utrap_info.next = self.cnn.trap_info.val();
        }
        self.core.rwb_valid.next = self.vec.rwb_valid.val();
        self.core.rwb_idx.next = self.vec.rwb_idx.val();
        self.core.rwb_data.next = self.vec.rwb_data.val();
        self.core.pwb_valid.next = self.att.pwb_valid.val();
        self.core.pwb_idx.next = self.att.pwb_idx.val();
        self.core.pwb_data.next = self.att.pwb_data.val();

        // ---- line port: the DMA unit, then the attention unit, then the CNN unit, fetch in the cycles they leave
        self.dma_turn.next = self.dma.m_req.val();
        self.att_turn.next = self.att.m_req.val() & !self.dma.m_req.val();
        self.cnn_turn.next = self.cnn.m_req.val() & !self.dma.m_req.val() & !self.att.m_req.val();
        self.line_req.next = self.dma.m_req.val() | self.att.m_req.val() | self.cnn.m_req.val() | self.core.f_req.val();
        self.m_req.next = self.line_req.val();
        self.m_write.next = (self.dma.m_write.val() & self.dma_turn.val()) | (self.att.m_write.val() & self.att_turn.val());
        self.m_addr.next = self.core.f_addr.val();
        self.m_wdata.next = self.dma.m_wdata.val();
        self.m_wmask.next = self.dma.m_wmask.val();
        self.m_tag.next = 0.into();
        if self.cnn_turn.val() {
            self.m_addr.next = self.cnn.m_addr.val();
            self.m_tag.next = 2.into();
        }
        if self.att_turn.val() {
            self.m_addr.next = self.att.m_addr.val();
            self.m_wdata.next = self.att.m_wdata.val();
            self.m_wmask.next = self.att.m_wmask.val();
            self.m_tag.next = 3.into();
        }
        if self.dma_turn.val() {
            self.m_addr.next = self.dma.m_addr.val();
            self.m_wdata.next = self.dma.m_wdata.val();
            self.m_wmask.next = self.dma.m_wmask.val();
            self.m_tag.next = 1.into();
        }
        self.dma.m_req_ready.next = self.m_req_ready.val();
        self.att.m_req_ready.next = self.m_req_ready.val() & !self.dma_turn.val();
        self.cnn.m_req_ready.next = self.m_req_ready.val() & !self.dma_turn.val() & !self.att_turn.val();
        self.core.f_req_ready.next = self.m_req_ready.val() & !self.dma_turn.val() & !self.att_turn.val() & !self.cnn_turn.val();
        self.cnn.m_resp.next = self.m_resp.val() & (self.m_resp_tag.val() == 2);
        self.cnn.m_rdata.next = self.m_rdata.val();
        self.dma.m_resp.next = self.m_resp.val() & (self.m_resp_tag.val() == 1);
        self.att.m_resp.next = self.m_resp.val() & (self.m_resp_tag.val() == 3);
        self.att.m_rdata.next = self.m_rdata.val();
        self.core.f_resp.next = self.m_resp.val() & (self.m_resp_tag.val() == 0);
        self.dma.m_rdata.next = self.m_rdata.val();
        self.core.f_data.next = self.m_rdata.val();
        // ---- weight port: the matrix unit's beats, in the cycles the line port leaves
        self.w_req.next = self.mat.m_req.val() & !self.line_req.val();
        self.w_addr.next = self.mat.m_addr.val();
        self.mat.m_req_ready.next = self.w_req_ready.val() & !self.line_req.val();
        self.mat.m_resp.next = self.w_resp.val();
        self.mat.m_rdata.next = self.w_rdata.val();

        // ---- the scratchpad: the DMA unit's line port or, while it runs, the matrix unit's or the vector
        // unit's; ldr reads when all are idle (the word at its address is word 0 of the line the next cycle)
        self.spm.clock.next = self.clock.val();
        self.spm.we.next = self.dma.s_we.val();
        self.spm.waddr.next = self.dma.s_waddr.val();
        self.spm.wdata.next = self.dma.s_wdata.val();
        self.spm.raddr.next = self.dma.s_raddr.val();
        if !self.mat.idle.val() & self.mat_go.val() {
            self.spm.we.next = self.mat.s_we.val();
            self.spm.waddr.next = self.mat.s_waddr.val();
            self.spm.wdata.next = self.mat.s_wdata.val();
            self.spm.raddr.next = self.mat.s_raddr.val();
        }
        if !self.vec.idle.val() {
            self.spm.we.next = self.vec.s_we.val();
            self.spm.waddr.next = self.vec.s_waddr.val();
            self.spm.wdata.next = self.vec.s_wdata.val();
            self.spm.raddr.next = self.vec.s_raddr.val();
        }
        if !self.att.idle.val() {
            self.spm.we.next = self.att.s_we.val();
            self.spm.waddr.next = self.att.s_waddr.val();
            self.spm.wdata.next = self.att.s_wdata.val();
            self.spm.raddr.next = self.att.s_raddr.val();
        }
        if !self.cnn.idle.val() {
            self.spm.we.next = self.cnn.s_we.val();
            self.spm.waddr.next = self.cnn.s_waddr.val();
            self.spm.wdata.next = self.cnn.s_wdata.val();
            self.spm.raddr.next = self.cnn.s_raddr.val();
        }
        if self.dma.idle.val() & self.mat.idle.val() & self.vec.idle.val() & self.att.idle.val() & self.cnn.idle.val() {
            self.spm.raddr.next = self.core.spm_addr.val();
        }
        self.dma.s_rdata.next = self.spm.rdata.val();
        self.mat.s_rdata.next = self.spm.rdata.val();
        self.vec.s_rdata.next = self.spm.rdata.val();
        self.att.s_rdata.next = self.spm.rdata.val();
        self.cnn.s_rdata.next = self.spm.rdata.val();

        // ---- the reduction file
        self.red.raddr.next = self.vec.red_raddr.val();
        self.red.we.next = self.vec.red_we.val();
        self.red.waddr.next = self.vec.red_waddr.val();
        self.red.wdata.next = self.vec.red_wdata.val();
        // (an early `matmul` reads and writes RED only once the others are idle)
        if !self.mat.idle.val() & self.mat_go.val() {
            self.red.raddr.next = self.mat.red_raddr.val();
            self.red.we.next = self.mat.red_we.val();
            self.red.waddr.next = self.mat.red_waddr.val();
            self.red.wdata.next = self.mat.red_wdata.val();
        }
        self.vec.red_rdata.next = self.red.rdata.val();
        self.mat.red_rdata.next = self.red.rdata.val();
        self.core.spm_data.next = self.spm.rdata.val().get_bits::<32>(0);
    }
}

/// The top of `config` (its scratchpad sets the bank depth, its memory the weight port), ready to simulate or
/// emit.
pub fn top_verilog(config: &OverlayConfig) -> Result<String, crate::emit::EmitError> {
    fn build<const WB: usize>(config: &OverlayConfig) -> Result<String, crate::emit::EmitError> {
        let spm = ScratchpadInstance::new(config)?;
        let mut t = Top::<WB>::new(config, crate::matrix::dp_cores(config)?, crate::vecunit::dp_cores()?, spm);
        t.clock.connect();
        t.reset.connect();
        t.mmio_addr.connect();
        t.mmio_wdata.connect();
        t.mmio_write.connect();
        t.mmio_read.connect();
        t.m_req_ready.connect();
        t.m_resp.connect();
        t.m_rdata.connect();
        t.m_resp_tag.connect();
        t.w_req_ready.connect();
        t.w_resp.connect();
        t.w_rdata.connect();
        t.connect_all();
        crate::emit::checked_verilog(&t)
    }
    crate::matrix::check_config(config)?;
    crate::attn::check_config(config)?;
    crate::matrix::with_weight_port!(config, WB => build::<WB>(config))
}
