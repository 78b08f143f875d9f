/*
 * src/onnx/onnx_import.h - ONNX ModelProto -> IR, through the protobuf-c
 * reader generated at build time from Debian's onnx.proto.
 */
#ifndef S4D_ONNX_IMPORT_H
#define S4D_ONNX_IMPORT_H

#include <stddef.h>

#include "ir/ir.h"

/*
 * Parses a serialized ModelProto into a new graph: opset imports, graph
 * inputs (static shapes required), initializers (raw_data or typed fields),
 * Constant nodes (turned into constant values), other nodes with their
 * attributes, graph outputs. Op resolution happens later, in the builder.
 * Returns S4D_OK, S4D_ERR_PARSE (bytes that are not a model, a tensor whose
 * data does not match its shape), S4D_ERR_UNSUPPORTED (dynamic dimensions,
 * external data, subgraph attributes, string tensors), S4D_ERR_NOT_FOUND (a
 * node input no earlier node produces), S4D_ERR_NO_MEMORY.
 */
s4d_status s4d_onnx_import(const void *data, size_t size, s4d_ir_graph **out, char *err,
                           size_t errsz);

/*
 * Parses a serialized TensorProto (the ONNX test data format) into t, whose
 * data is malloc'd; *name (may be NULL) gets a malloc'd copy of its name.
 */
s4d_status s4d_onnx_read_tensor(const void *data, size_t size, s4d_tensor *t, char **name,
                                char *err, size_t errsz);

#endif /* S4D_ONNX_IMPORT_H */
