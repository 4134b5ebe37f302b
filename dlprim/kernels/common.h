// Shared by every template (Mako include of common.h).
// dtype is the element type the template was rendered for (float unless stated)
#ifndef DLPRIM_COMMON_H
#define DLPRIM_COMMON_H
#define ACT_identity(x) (x)
#define ACT_relu(x) fmax((x), 0.0f)
#define ACT_relu6(x) fmin(fmax((x), 0.0f), 6.0f)
#define ACT_sigmoid(x) (1.0f / (1.0f + exp(-(x))))
#define ACT_tanh(x) tanh(x)
#endif
