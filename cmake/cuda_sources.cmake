# CUDA backend sources, one translation unit per (precision, dimension) so that a
# 2-core machine compiles them in parallel and no unit grows too large.
target_compile_definitions(pmkit PUBLIC PMKIT_WITH_CUDA)
target_link_libraries(pmkit PRIVATE CUDA::cudart)
