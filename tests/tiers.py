"""The tiers of the suite, by module: one table, read by conftest.py, which marks every
test with its tier (``-m unit`` and so on).

- unit: operators, kernels, launchers, the pure-Python parts: a developer's inner loop
  (``make test-quick``);
- model: whole nets and models, against PyTorch or onnxruntime, and the front ends that
  carry them (ONNX, the ``ocl`` device, torch.compile, training);
- system: tests that start processes: notebooks, mpiexec, kill tests, command-line runs,
  packaging.

``make test`` runs all three.
"""

SYSTEM = {"test_notebooks", "test_distributed", "test_train_kill", "test_packaging",
          "test_docs", "test_benchmark", "test_data_pipeline"}
MODEL = {"test_models", "test_vit", "test_convnext", "test_gpt", "test_charlm",
         "test_net_torch", "test_torch_backend", "test_torch_compile",
         "test_torch_from_netconfig", "test_onnx_export", "test_onnx_families",
         "test_onnx_ops", "test_onnx_recurrent", "test_onnx_spelling", "test_onnx_errors",
         "test_dlprimitives_examples", "test_dlprim_cases", "test_fit", "test_train",
         "test_predict", "test_hostile_train", "test_layers_in_net", "test_fusion",
         "test_half_storage", "test_multi_tensor", "test_nn",
         "test_torch_hf_models", "test_onnx_hf_exports", "test_onnx_loss", "test_onnx_node",
         "test_llm_generate", "test_llm_llama", "test_gpt_decoder", "test_llm_server"}
TIERS = ("unit", "model", "system")


def tier_of(module_name):
    """The tier of a test module, by its name (``test_gemm`` -> ``"unit"``)."""
    name = module_name.rpartition(".")[2]
    if name in SYSTEM:
        return "system"
    if name in MODEL:
        return "model"
    return "unit"
