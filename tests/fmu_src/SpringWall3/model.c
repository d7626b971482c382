/*
 * SpringWall3: SpringMass3 (tests/fmu_src/SpringMass3/model.c) with a wall at x = 0, an FMI 3.0 Model
 * Exchange FMU with one state event (issue #56), written for twinfer's tests. See that file's header.
 */
#define WALL 1
#include "../SpringMass3/model.c"
