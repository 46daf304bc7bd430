"""The bandwidth model of a decode step fitted to this machine (``bandwidth``) and the throughput it
PROJECTS on GPU servers we do not have (``hardware``): model outputs, labelled as such, never measurements.
``measured_rows`` reads the benchmark CSVs the model is fitted to; ``fit_policy`` fits it, chooses the sparse
efficiency the projections use and builds the tables of ``magicpig project``."""
from magicpig.harness.projection.bandwidth import (COEFFICIENTS, EFFICIENCY, FAMILIES, MAX_LOO_ERROR, Fit,
                                                   SparseSetting, StepWork, dtype_bytes, features, fit,
                                                   leave_one_out, method_family, nnls, sparse_setting, step_work,
                                                   trust_problems, weight_elem_bytes)
from magicpig.harness.projection.hardware import (HARDWARE, LABEL, STOCK_KV_PASSES, Hardware, Projection,
                                                  baseline_projection, cpu_full_attention, gpu_full_attention,
                                                  h200_rows, latency_rows, magicpig_offload, paper_baselines,
                                                  paper_projection_rows, project_gpu_row)

__all__ = ["COEFFICIENTS", "EFFICIENCY", "FAMILIES", "MAX_LOO_ERROR", "Fit", "SparseSetting", "StepWork",
           "dtype_bytes", "features", "fit", "leave_one_out", "method_family", "nnls", "sparse_setting",
           "step_work", "trust_problems", "weight_elem_bytes", "HARDWARE", "LABEL", "STOCK_KV_PASSES", "Hardware",
           "Projection", "baseline_projection", "cpu_full_attention", "gpu_full_attention", "h200_rows",
           "latency_rows", "magicpig_offload", "paper_baselines", "paper_projection_rows", "project_gpu_row"]
