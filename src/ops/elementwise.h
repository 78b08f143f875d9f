/*
 * src/ops/elementwise.h - the typed parameters of the element-wise op schemas
 * (internal; not installed). Their infer() fills these structs once, at build
 * and load time; the host reference (binary_elementwise.c,
 * unary_elementwise.c) and the CUDA kernels (backend/cuda/ops/elementwise.c)
 * read them instead of parsing attributes again.
 *
 * Plain data only (no pointers): the struct is recomputed from the layer's
 * attributes and constant inputs whenever an engine is loaded.
 *
 * Ops without parameters beyond their output dtype: Where, Cast, CastLike,
 * IsNaN, Not.
 */
#ifndef S4D_OPS_ELEMENTWISE_H
#define S4D_OPS_ELEMENTWISE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Binary and variadic ops. Mod appears as S4D_BIN_MOD or S4D_BIN_FMOD after
   its fmod attribute; Sum and Mean as S4D_BIN_ADD. */
typedef enum s4d_binop {
    S4D_BIN_ADD, S4D_BIN_SUB, S4D_BIN_MUL, S4D_BIN_DIV, S4D_BIN_POW, S4D_BIN_MIN, S4D_BIN_MAX,
    S4D_BIN_EQ, S4D_BIN_GT, S4D_BIN_LT, S4D_BIN_GE, S4D_BIN_LE, S4D_BIN_AND, S4D_BIN_OR,
    S4D_BIN_XOR, S4D_BIN_PRELU, S4D_BIN_MOD, S4D_BIN_FMOD
} s4d_binop;

#define S4D_BINOP_COUNT 18

typedef struct s4d_binary_params {
    int32_t op;   /* s4d_binop */
    int32_t mean; /* Mean: the folded sum is divided by the number of inputs */
} s4d_binary_params;

/* Unary ops; Gelu appears as S4D_UN_GELU or S4D_UN_GELU_TANH after its
   approximate attribute. */
typedef enum s4d_unop {
    S4D_UN_RELU, S4D_UN_LEAKY_RELU, S4D_UN_SIGMOID, S4D_UN_TANH, S4D_UN_GELU, S4D_UN_GELU_TANH,
    S4D_UN_ERF, S4D_UN_SQRT, S4D_UN_RECIPROCAL, S4D_UN_EXP, S4D_UN_LOG, S4D_UN_NEG, S4D_UN_ABS,
    S4D_UN_SIN, S4D_UN_COS, S4D_UN_TAN, S4D_UN_ASIN, S4D_UN_ACOS, S4D_UN_ATAN, S4D_UN_SINH,
    S4D_UN_COSH, S4D_UN_ASINH, S4D_UN_ACOSH, S4D_UN_ATANH, S4D_UN_FLOOR, S4D_UN_CEIL,
    S4D_UN_ROUND, S4D_UN_SIGN, S4D_UN_CLIP, S4D_UN_NOT, S4D_UN_ELU, S4D_UN_SELU,
    S4D_UN_HARD_SIGMOID, S4D_UN_HARD_SWISH, S4D_UN_SOFTPLUS, S4D_UN_SOFTSIGN, S4D_UN_CELU,
    S4D_UN_THRESHOLDED_RELU, S4D_UN_MISH
} s4d_unop;

#define S4D_UNOP_COUNT 39

/*
 * alpha, beta, gamma: LeakyRelu, Elu, Celu, ThresholdedRelu alpha; Selu alpha
 * and gamma; HardSigmoid alpha and beta. Clip keeps its float bounds in alpha
 * (min) and beta (max) and its integer bounds, exact, in min_i and max_i; both
 * start at the limits of the element type (infinities for floats). From opset
 * 11 the bounds are optional inputs: have_min/have_max say which are present,
 * and min_known/max_known which of those were constants at build time (their
 * values are then in alpha/min_i, beta/max_i); a present bound that is not
 * known is read from its input when the op runs.
 */
typedef struct s4d_unary_params {
    int32_t op; /* s4d_unop */
    int32_t have_min, have_max, min_known, max_known;
    double alpha, beta, gamma;
    int64_t min_i, max_i;
} s4d_unary_params;

/* IsInf. */
typedef struct s4d_isinf_params {
    int32_t detect_negative, detect_positive;
} s4d_isinf_params;

#ifdef __cplusplus
}
#endif

#endif /* S4D_OPS_ELEMENTWISE_H */
