//! The metric names kforge reasons about, in one place, so the shipped sections, the roll-up, the
//! diagnosis rules and the Judge's table cannot drift apart. Names are ncu's own (base name plus
//! roll-up and submetric suffix, exactly as they head the columns of a `--page raw` export).

pub const DURATION: &str = "gpu__time_duration.sum";

pub const SM_THROUGHPUT: &str = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
/// The larger of the memory units' throughputs (DRAM, L1, L2, ...): ncu's "Memory Throughput".
pub const MEMORY_THROUGHPUT: &str =
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed";
/// DRAM alone, as ncu's SpeedOfLight section reads it on sm_90.
pub const DRAM_THROUGHPUT: &str = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed";
/// The older spelling of DRAM throughput (CudaForge's list); read when the first is absent.
pub const DRAM_THROUGHPUT_ALT: &str = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
pub const DRAM_BYTES_READ: &str = "dram__bytes_read.sum";
pub const DRAM_BYTES_WRITE: &str = "dram__bytes_write.sum";
pub const L1_HIT_RATE: &str = "l1tex__t_sector_hit_rate.pct";
pub const L2_HIT_RATE: &str = "lts__t_sector_hit_rate.pct";
pub const L1_THROUGHPUT: &str = "l1tex__throughput.avg.pct_of_peak_sustained_active";
pub const L2_THROUGHPUT: &str = "lts__throughput.avg.pct_of_peak_sustained_elapsed";

pub const ACHIEVED_OCCUPANCY: &str = "sm__warps_active.avg.pct_of_peak_sustained_active";
pub const THEORETICAL_OCCUPANCY: &str = "sm__maximum_warps_per_active_cycle_pct";
pub const LIMIT_REGISTERS: &str = "launch__occupancy_limit_registers";
pub const LIMIT_SHARED_MEM: &str = "launch__occupancy_limit_shared_mem";
pub const LIMIT_WARPS: &str = "launch__occupancy_limit_warps";
pub const LIMIT_BLOCKS: &str = "launch__occupancy_limit_blocks";
pub const LIMIT_BARRIERS: &str = "launch__occupancy_limit_barriers";

pub const GRID_SIZE: &str = "launch__grid_size";
pub const BLOCK_SIZE: &str = "launch__block_size";
pub const WAVES_PER_SM: &str = "launch__waves_per_multiprocessor";
pub const SM_COUNT: &str = "launch__sm_count";
pub const SM_COUNT_ATTRIBUTE: &str = "device__attribute_multiprocessor_count";
pub const REGISTERS_PER_THREAD: &str = "launch__registers_per_thread";
pub const SHARED_MEM_STATIC: &str = "launch__shared_mem_per_block_static";
pub const SHARED_MEM_DYNAMIC: &str = "launch__shared_mem_per_block_dynamic";

pub const SM_ACTIVE_CYCLES: &str = "sm__cycles_active.avg";
pub const INSTRUCTIONS: &str = "smsp__inst_executed.sum";
pub const FMA_PIPE: &str = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active";
pub const TENSOR_PIPE: &str = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active";

/// Cycles between two instructions a warp issues: the sum of all stall reasons plus "selected".
pub const WARP_LATENCY: &str = "smsp__average_warp_latency_per_inst_issued.ratio";
/// Stall-reason metrics are `STALL_PREFIX + reason + STALL_SUFFIX` (cycles per issued instruction).
pub const STALL_PREFIX: &str = "smsp__average_warps_issue_stalled_";
pub const STALL_SUFFIX: &str = "_per_issue_active.ratio";

pub const BRANCH_UNIFORMITY: &str = "smsp__sass_average_branch_targets_threads_uniform.pct";
pub const DIVERGENT_BRANCHES: &str = "smsp__sass_branch_targets_threads_divergent.sum";

pub const GLOBAL_LOAD_SECTORS: &str = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum";
pub const GLOBAL_LOAD_REQUESTS: &str = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum";
pub const GLOBAL_STORE_SECTORS: &str = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum";
pub const GLOBAL_STORE_REQUESTS: &str = "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum";
pub const GLOBAL_LOAD_BYTES_PER_SECTOR: &str =
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio";
pub const GLOBAL_STORE_BYTES_PER_SECTOR: &str =
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio";

pub const SHARED_LOAD_CONFLICTS: &str = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum";
pub const SHARED_STORE_CONFLICTS: &str = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum";
pub const SHARED_LOAD_WAVEFRONTS: &str = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum";
pub const SHARED_STORE_WAVEFRONTS: &str = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum";

/// The stall-reason metric for `reason` (e.g. "long_scoreboard").
pub fn stall_metric(reason: &str) -> String {
    format!("{STALL_PREFIX}{reason}{STALL_SUFFIX}")
}

/// The reason in a stall-reason metric name ("long_scoreboard"), or None for other metrics.
pub fn stall_reason(metric: &str) -> Option<&str> {
    metric
        .strip_prefix(STALL_PREFIX)?
        .strip_suffix(STALL_SUFFIX)
        .filter(|reason| !reason.is_empty())
}

/// The five stall reasons the default set collects (CudaForge's, with "not selected" and "math
/// pipe throttle" both kept since they tell different stories), in the Judge table's order.
pub const DEFAULT_STALLS: &[&str] = &[
    "long_scoreboard",
    "barrier",
    "mio_throttle",
    "short_scoreboard",
    "not_selected",
    "math_pipe_throttle",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stall_names_round_trip() {
        let name = stall_metric("long_scoreboard");
        assert_eq!(
            name,
            "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
        );
        assert_eq!(stall_reason(&name), Some("long_scoreboard"));
        assert_eq!(stall_reason(WARP_LATENCY), None);
        assert_eq!(
            stall_reason("smsp__average_warps_issue_stalled__per_issue_active.ratio"),
            None
        );
    }
}
