//! The GPU kernels as PTX text (`dp4a` dot products; row-major one warp a
//! row, input-major one lane an output) that the CUDA driver compiles for
//! the card it runs on, and their launch constants.

use super::Layout;

/// The GPU kernels, `gemv_int8` and `gemv_int4` (row-major) and
/// `gemv_int8_input_major` and `gemv_int4_input_major`, as PTX text.
///
/// One launch runs the GEMVs of up to `GPU_BATCH` matrices of one packing,
/// as a fused engine runs a layer's experts at once: the parameters are an
/// array of `GPU_DESCRIPTOR_BYTES`-byte descriptors (`GemvLaunch` in
/// `cuda_bench` writes them) and their count. Descriptor `i` takes the
/// blocks from its `first_block` to the next one's; a block finds its
/// descriptor by a scan of the array in parameter space.
///
/// One warp a row (blocks of `GPU_BLOCK_THREADS`); lane `l` takes chunks
/// `l, l + 32, ...` of the row: 16 bytes of weights, the inputs they meet
/// (16 int8 values, or the even and the odd 16 for int4), four `dp4a` (int4:
/// eight, on the low and high nibbles), then `acc += scale_w * (scale_x *
/// dot - offset)` with the chunk's terms (`QuantizedInput::chunk_terms`).
/// A butterfly of shuffles sums the lanes; lane 0 writes `y[row]`.
///
/// Input-major, thread `t` of a block takes output `o` (blocks of
/// `GPU_BLOCK_THREADS` consecutive outputs, so a warp's loads of a packed
/// input row are 32 consecutive bytes) and walks the input dimension chunk
/// by chunk: 16 packed input rows, the byte of each at stride `rows`, put
/// four by four into words that meet the chunk's inputs in `dp4a` as the
/// row-major kernel's do, then the same `acc += scale_w * (scale_x * dot -
/// offset)` with the scale of output `o`'s group.
///
/// A descriptor (the same for both layouts): weights, scales, inputs, chunk terms, y (device pointers),
/// rows, chunks a row, groups a row, log2(chunks a group), the byte
/// offset of the odd inputs (int4; 0 for int8), and its first block.
pub fn ptx() -> String {
    const INT8_DOT: &str = "
    dp4a.s32.s32 %r21, %r13, %r17, %r21;
    dp4a.s32.s32 %r21, %r14, %r18, %r21;
    dp4a.s32.s32 %r21, %r15, %r19, %r21;
    dp4a.s32.s32 %r21, %r16, %r20, %r21;";
    let mut int4_dot = String::from(
        "
    add.s64 %rd18, %rd13, %rd10;
    ld.global.nc.v4.u32 {%r22, %r23, %r24, %r25}, [%rd18];",
    );
    for (w, even, odd) in [(13, 17, 22), (14, 18, 23), (15, 19, 24), (16, 20, 25)] {
        int4_dot.push_str(&format!(
            "
    and.b32 %r30, %r{w}, 0x0F0F0F0F;
    dp4a.u32.s32 %r21, %r30, %r{even}, %r21;
    shr.u32 %r31, %r{w}, 4;
    and.b32 %r31, %r31, 0x0F0F0F0F;
    dp4a.u32.s32 %r21, %r31, %r{odd}, %r21;"
        ));
    }
    // The butterfly: each step adds the lane `lanes` away, halving the
    // distance until lane 0 holds the warp's sum.
    let sum_lanes: String = [16, 8, 4, 2, 1]
        .iter()
        .map(|lanes| {
            format!(
                "
    mov.b32 %r27, %f1;
    shfl.sync.bfly.b32 %r28, %r27, {lanes}, 31, 0xffffffff;
    mov.b32 %f7, %r28;
    add.f32 %f1, %f1, %f7;"
            )
        })
        .collect();
    let mut text = String::from(".version 6.0\n.target sm_61\n.address_size 64\n");
    let kernels = [
        (Layout::RowMajor, 8, KERNEL, INT8_DOT.to_string()),
        (Layout::RowMajor, 4, KERNEL, int4_dot),
        (
            Layout::InputMajor,
            8,
            INPUT_MAJOR_KERNEL,
            input_major_dot(8),
        ),
        (
            Layout::InputMajor,
            4,
            INPUT_MAJOR_KERNEL,
            input_major_dot(4),
        ),
    ];
    for (layout, bits, kernel, dot) in kernels {
        let kernel = kernel
            .replace("REGISTERS", REGISTERS)
            .replace("SCALE_ADD", SCALE_ADD)
            .replace("FIND", FIND_DESCRIPTOR)
            .replace("SUM_LANES", &sum_lanes)
            .replace(
                "DESCRIPTORS",
                &(GPU_BATCH * GPU_DESCRIPTOR_BYTES).to_string(),
            )
            .replace("DESCRIPTOR_BYTES", &GPU_DESCRIPTOR_BYTES.to_string());
        let name = kernel_name(bits, layout);
        text.push_str(&kernel.replace("NAME", name).replace("DOT", &dot));
    }
    text
}

/// The kernel of `bits` and `layout` in `ptx`'s text.
pub fn kernel_name(bits: u32, layout: Layout) -> &'static str {
    match (bits, layout) {
        (8, Layout::RowMajor) => "gemv_int8",
        (_, Layout::RowMajor) => "gemv_int4",
        (8, Layout::InputMajor) => "gemv_int8_input_major",
        (_, Layout::InputMajor) => "gemv_int4_input_major",
    }
}

/// Outputs a block computes: a warp a row (row-major), a thread an output
/// (input-major).
pub fn outputs_per_block(layout: Layout) -> u32 {
    match layout {
        Layout::RowMajor => GPU_BLOCK_THREADS / 32,
        Layout::InputMajor => GPU_BLOCK_THREADS,
    }
}

/// The input-major kernel's dot of one chunk: per word of inputs, the
/// weight bytes of four packed input rows (at stride `rows`, `%rd11`) of
/// this thread's output put into one word (`bfi`), then `dp4a` as the
/// row-major kernel (int4: low nibbles with the even inputs, high with the
/// odd ones).
fn input_major_dot(bits: u32) -> String {
    let mut dot = String::new();
    if bits == 4 {
        dot.push_str(
            "
    add.s64 %rd18, %rd13, %rd10;
    ld.global.nc.v4.u32 {%r22, %r23, %r24, %r25}, [%rd18];",
        );
    }
    for (inputs, odd) in [(13, 22), (14, 23), (15, 24), (16, 25)] {
        for byte in 36..40 {
            dot.push_str(&format!(
                "
    ld.global.nc.u8 %r{byte}, [%rd7];
    add.s64 %rd7, %rd7, %rd11;"
            ));
        }
        dot.push_str(
            "
    bfi.b32 %r29, %r37, %r36, 8, 8;
    bfi.b32 %r29, %r38, %r29, 16, 8;
    bfi.b32 %r29, %r39, %r29, 24, 8;",
        );
        if bits == 8 {
            dot.push_str(&format!(
                "
    dp4a.s32.s32 %r21, %r29, %r{inputs}, %r21;"
            ));
        } else {
            dot.push_str(&format!(
                "
    and.b32 %r30, %r29, 0x0F0F0F0F;
    dp4a.u32.s32 %r21, %r30, %r{inputs}, %r21;
    shr.u32 %r31, %r29, 4;
    and.b32 %r31, %r31, 0x0F0F0F0F;
    dp4a.u32.s32 %r21, %r31, %r{odd}, %r21;"
            ));
        }
    }
    dot
}

/// Threads a block of the GPU kernels (eight warps, eight rows).
pub const GPU_BLOCK_THREADS: u32 = 256;

/// Matrices one launch of the GPU kernels takes at most.
pub const GPU_BATCH: usize = 32;

/// Bytes of one descriptor in the kernels' parameters: five device
/// pointers, six `u32`s, and padding to a multiple of 8.
pub const GPU_DESCRIPTOR_BYTES: usize = 64;

/// Both layouts' registers, then the block's descriptor found.
const REGISTERS: &str = "    .reg .pred %p<3>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<24>;
    .reg .f32 %f<12>;
    .reg .b16 %h<2>;
FIND";

/// Both layouts' step after a chunk's dot product `%r21`: the weights'
/// F16 scale (its address in `%rd15`) and the chunk's input terms, added
/// to the output's sum `%f1` as `scale_w * (scale_x * dot - offset)`.
const SCALE_ADD: &str = "    ld.global.nc.b16 %h1, [%rd15];
    cvt.f32.f16 %f2, %h1;
    mul.wide.u32 %rd16, %r12, 8;
    add.s64 %rd17, %rd4, %rd16;
    ld.global.nc.v2.f32 {%f3, %f4}, [%rd17];
    cvt.rn.f32.s32 %f5, %r21;
    mul.f32 %f6, %f3, %f5;
    sub.f32 %f6, %f6, %f4;
    fma.rn.f32 %f1, %f2, %f6, %f1;";

const KERNEL: &str = "
.visible .entry NAME(.param .align 8 .b8 p_desc[DESCRIPTORS], .param .u32 p_count)
{
REGISTERS    mov.u32 %r7, %ntid.x;
    mov.u32 %r8, %tid.x;
    mad.lo.u32 %r9, %r6, %r7, %r8;
    shr.u32 %r10, %r9, 5;
    and.b32 %r11, %r8, 31;
    setp.ge.u32 %p1, %r10, %r1;
    @%p1 bra NAME_done;
    mul.wide.u32 %rd6, %r10, %r2;
    shl.b64 %rd6, %rd6, 4;
    add.s64 %rd7, %rd1, %rd6;
    mul.wide.u32 %rd8, %r10, %r3;
    shl.b64 %rd8, %rd8, 1;
    add.s64 %rd9, %rd2, %rd8;
    cvt.u64.u32 %rd10, %r5;
    mov.f32 %f1, 0f00000000;
    mov.u32 %r12, %r11;
NAME_loop:
    setp.ge.u32 %p2, %r12, %r2;
    @%p2 bra NAME_reduce;
    mul.wide.u32 %rd11, %r12, 16;
    add.s64 %rd12, %rd7, %rd11;
    ld.global.nc.v4.u32 {%r13, %r14, %r15, %r16}, [%rd12];
    add.s64 %rd13, %rd3, %rd11;
    ld.global.nc.v4.u32 {%r17, %r18, %r19, %r20}, [%rd13];
    mov.u32 %r21, 0;DOT
    shr.u32 %r26, %r12, %r4;
    mul.wide.u32 %rd14, %r26, 2;
    add.s64 %rd15, %rd9, %rd14;
SCALE_ADD
    add.u32 %r12, %r12, 32;
    bra NAME_loop;
NAME_reduce:SUM_LANES
    setp.ne.u32 %p2, %r11, 0;
    @%p2 bra NAME_done;
    mul.wide.u32 %rd18, %r10, 4;
    add.s64 %rd19, %rd5, %rd18;
    st.global.f32 [%rd19], %f1;
NAME_done:
    ret;
}
";

/// A block's descriptor: the last whose first block is at most the
/// block's, its fields loaded into `%rd1`-`%rd5` and `%r1`-`%r5`, and
/// `%r6` the block's index within it.
const FIND_DESCRIPTOR: &str = "    mov.u32 %r6, %ctaid.x;
    ld.param.u32 %r32, [p_count];
    mov.u64 %rd20, p_desc;
    mov.u32 %r33, 0;
NAME_find:
    add.u32 %r34, %r33, 1;
    setp.ge.u32 %p1, %r34, %r32;
    @%p1 bra NAME_found;
    mul.wide.u32 %rd21, %r34, DESCRIPTOR_BYTES;
    add.s64 %rd22, %rd20, %rd21;
    ld.param.u32 %r35, [%rd22+60];
    setp.gt.u32 %p1, %r35, %r6;
    @%p1 bra NAME_found;
    mov.u32 %r33, %r34;
    bra NAME_find;
NAME_found:
    mul.wide.u32 %rd21, %r33, DESCRIPTOR_BYTES;
    add.s64 %rd22, %rd20, %rd21;
    ld.param.u64 %rd1, [%rd22];
    ld.param.u64 %rd2, [%rd22+8];
    ld.param.u64 %rd3, [%rd22+16];
    ld.param.u64 %rd4, [%rd22+24];
    ld.param.u64 %rd5, [%rd22+32];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    cvta.to.global.u64 %rd4, %rd4;
    cvta.to.global.u64 %rd5, %rd5;
    ld.param.u32 %r1, [%rd22+40];
    ld.param.u32 %r2, [%rd22+44];
    ld.param.u32 %r3, [%rd22+48];
    ld.param.u32 %r4, [%rd22+52];
    ld.param.u32 %r5, [%rd22+56];
    ld.param.u32 %r35, [%rd22+60];
    sub.u32 %r6, %r6, %r35;
";

const INPUT_MAJOR_KERNEL: &str = "
.visible .entry NAME(.param .align 8 .b8 p_desc[DESCRIPTORS], .param .u32 p_count)
{
REGISTERS    mov.u32 %r7, %ntid.x;
    mov.u32 %r8, %tid.x;
    mad.lo.u32 %r9, %r6, %r7, %r8;
    setp.ge.u32 %p1, %r9, %r1;
    @%p1 bra NAME_done;
    cvt.u64.u32 %rd6, %r9;
    add.s64 %rd7, %rd1, %rd6;
    mul.wide.u32 %rd8, %r9, 2;
    add.s64 %rd9, %rd2, %rd8;
    cvt.u64.u32 %rd10, %r5;
    cvt.u64.u32 %rd11, %r1;
    mov.f32 %f1, 0f00000000;
    mov.u32 %r12, 0;
NAME_loop:
    setp.ge.u32 %p2, %r12, %r2;
    @%p2 bra NAME_store;
    mul.wide.u32 %rd12, %r12, 16;
    add.s64 %rd13, %rd3, %rd12;
    ld.global.nc.v4.u32 {%r13, %r14, %r15, %r16}, [%rd13];
    mov.u32 %r21, 0;DOT
    shr.u32 %r26, %r12, %r4;
    mul.wide.u32 %rd14, %r26, %r1;
    shl.b64 %rd14, %rd14, 1;
    add.s64 %rd15, %rd9, %rd14;
SCALE_ADD
    add.u32 %r12, %r12, 1;
    bra NAME_loop;
NAME_store:
    mul.wide.u32 %rd18, %r9, 4;
    add.s64 %rd19, %rd5, %rd18;
    st.global.f32 [%rd19], %f1;
NAME_done:
    ret;
}
";
