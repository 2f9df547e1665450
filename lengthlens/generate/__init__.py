"""Generation module: verification rules, a CPU reference speculative sampler, and the vLLM path.

Nothing here is imported by the analysis side. torch/transformers (extra ``lengthlens[reference]``)
and vLLM (extra ``lengthlens[vllm]``) are imported only by the submodules that need them, so
``import lengthlens.generate`` works without either.
"""
