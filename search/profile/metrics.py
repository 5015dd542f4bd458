"""What the profilers are asked for: Nsight Compute metric names and perf events, as data.

Nsight Compute names (``unit__counter.rollup.submetric``), from its Kernel Profiling Guide
and the sections that show them (SpeedOfLight, MemoryWorkloadAnalysis, Occupancy,
LaunchStatistics, SchedulerStatistics, WarpStateStatistics, ComputeWorkloadAnalysis).
Collected with ``--metrics`` rather than whole sections: the few passes these need replay a
kernel far fewer times than ``--set full``. A name the installed ncu does not know is
dropped and the profile says so (``Profile.missing``); the diagnosis reads what is there.

Checked for sm_90 (H100/H200 are both the GH100 chip): every hardware metric below is
listed by ``ncu --query-metrics --chips gh100 --query-metrics-mode all`` (Nsight Compute
2024.1.1, which queries a chip without a GPU) and accepted by CUPTI's profiler host API
for chip "GH100" (CUDA 13.0). The ``launch__*`` names are not listed by --query-metrics by
design; they are in the Kernel Profiling Guide, "Metrics Reference: Launch Metrics", and
``sm__maximum_warps_per_active_cycle_pct`` is the theoretical occupancy of the stock
Occupancy and LaunchStatistics sections. All of them, launch__* included, came back with
these names and units in the raw CSV that ncu 2024.1.1 printed for an sm_90 report.
"""
from __future__ import annotations

# the time and the speed-of-light of the two sides
DURATION = "gpu__time_duration.sum"                                        # ns
SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"          # compute SOL, %
MEMORY_THROUGHPUT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"  # %
DRAM_THROUGHPUT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"      # %
DRAM_READ = "dram__bytes_read.sum"                                          # bytes
DRAM_WRITE = "dram__bytes_write.sum"                                        # bytes
L1_HIT = "l1tex__t_sector_hit_rate.pct"
L2_HIT = "lts__t_sector_hit_rate.pct"

# pipes: the compute side's busiest units
TENSOR_PIPE = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
FMA_PIPE = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"
ALU_PIPE = "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"
LSU_PIPE = "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active"

# occupancy and scheduling: the latency side
ACHIEVED_OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"    # %
THEORETICAL_OCCUPANCY = "sm__maximum_warps_per_active_cycle_pct"            # %
ELIGIBLE_WARPS = "smsp__warps_eligible.avg.per_cycle_active"                # per scheduler
ISSUE_ACTIVE = "smsp__issue_active.avg.pct_of_peak_sustained_active"        # %
REGISTERS = "launch__registers_per_thread"
BLOCK_SIZE = "launch__block_size"
GRID_SIZE = "launch__grid_size"
WAVES = "launch__waves_per_multiprocessor"
SHARED_PER_BLOCK = "launch__shared_mem_per_block_allocated"
# blocks per SM each resource allows; the smallest names what limits the occupancy
LIMITS = {"registers": "launch__occupancy_limit_registers",
          "shared memory": "launch__occupancy_limit_shared_mem",
          "warps": "launch__occupancy_limit_warps",
          "blocks": "launch__occupancy_limit_blocks"}

# stall reasons: the share of active warps stalled on each, per cycle (percent). All
# exist on GH100; "gmma" (waiting on warpgroup MMA, what tl.dot compiles to on sm_90)
# exists on GH100 only, and Blackwell chips drop "imc_miss": an ncu that does not know one
# refuses it and the run goes on without it (ncu.run)
STALL_REASONS = ("long_scoreboard", "short_scoreboard", "barrier", "membar", "mio_throttle",
                 "lg_throttle", "math_pipe_throttle", "wait", "not_selected",
                 "no_instruction", "dispatch_stall", "branch_resolving", "drain",
                 "imc_miss", "sleeping", "tex_throttle", "misc", "gmma")


def stall_metric(reason: str) -> str:
    return f"smsp__warp_issue_stalled_{reason}_per_warp_active.pct"


STALLS = {reason: stall_metric(reason) for reason in STALL_REASONS}

NCU_METRICS: tuple[str, ...] = (
    DURATION, SM_THROUGHPUT, MEMORY_THROUGHPUT, DRAM_THROUGHPUT, DRAM_READ, DRAM_WRITE,
    L1_HIT, L2_HIT, TENSOR_PIPE, FMA_PIPE, ALU_PIPE, LSU_PIPE, ACHIEVED_OCCUPANCY,
    THEORETICAL_OCCUPANCY, ELIGIBLE_WARPS, ISSUE_ACTIVE, REGISTERS, BLOCK_SIZE, GRID_SIZE,
    WAVES, SHARED_PER_BLOCK, *LIMITS.values(), *STALLS.values())

# perf stat: generic hardware events (the kernel maps them to the CPU's own)
CYCLES = "cycles"
INSTRUCTIONS = "instructions"
CACHE_REFERENCES = "cache-references"
CACHE_MISSES = "cache-misses"
LLC_LOAD_MISSES = "LLC-load-misses"
LLC_STORE_MISSES = "LLC-store-misses"
TASK_CLOCK = "task-clock"                                                    # ms
PERF_EVENTS: tuple[str, ...] = (TASK_CLOCK, CYCLES, INSTRUCTIONS, CACHE_REFERENCES,
                                CACHE_MISSES, LLC_LOAD_MISSES, LLC_STORE_MISSES)
LINE_BYTES = 64  # what one last-level-cache miss moves from memory
