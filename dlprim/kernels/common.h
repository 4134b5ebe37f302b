<%!
    # the epilogue activations come from the activation table, so the GEMM and
    # convolution epilogues and the pointwise layers cannot drift apart
    from dlprim.core.activation import epilogue_macros
%>\
// Shared by every template (Mako include of common.h).
// dtype is the element type the template was rendered for (float unless stated)
#ifndef DLPRIM_COMMON_H
#define DLPRIM_COMMON_H
${epilogue_macros()}
#endif
