# da_bench.order: --order permutes the anchors, their locations and weights together, so the CPU
# forward's sum of |output| over all anchors is the one of the workload's own order (printed to
# 6 digits; only the order of the additions changes), and the workload line names the order.
# Run as: cmake -DBENCH=path/to/s4d_da_bench -P da_bench_order.cmake
foreach(order natural desc shuffle)
  execute_process(COMMAND ${BENCH} --device cpu --anchors 60 --channels 64 --iters 1 --warmup 0
                          --order ${order}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "--order ${order}: exit ${rc}\n${out}${err}")
  endif()
  if(NOT out MATCHES "workload \\(anchors ${order}\\)")
    message(FATAL_ERROR "--order ${order}: the workload line does not name the order\n${out}")
  endif()
  if(NOT out MATCHES "sum \\|out\\| = ([0-9.e+-]+) over")
    message(FATAL_ERROR "--order ${order}: no checksum line\n${out}")
  endif()
  set(sum_${order} ${CMAKE_MATCH_1})
  message(STATUS "--order ${order}: sum |out| = ${sum_${order}}")
endforeach()
foreach(order desc shuffle)
  if(NOT sum_${order} STREQUAL sum_natural)
    message(FATAL_ERROR "--order ${order} changed the outputs: ${sum_${order}} against ${sum_natural}")
  endif()
endforeach()
# An unknown order: exit 2 and a message that names it.
execute_process(COMMAND ${BENCH} --device cpu --order sideways
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--order must be natural, desc, asc or shuffle, got 'sideways'")
  message(FATAL_ERROR "--order sideways: expected exit 2 and the accepted orders, got ${rc}\n${out}${err}")
endif()
