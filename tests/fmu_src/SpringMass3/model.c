/*
 * SpringMass3: the SpringMass test model of tests/fmu_src/SpringMass as an FMI 3.0 Model Exchange FMU
 * (issue #56), written for twinfer's tests. It provides directional derivatives.
 *
 * One mass on a spring and a damper to the ground, pushed by an input force:
 *
 *     der(x) = v,    der(v) = a = (F - k x - c v) / m
 *
 * States x and v (both also outputs), input F (continuous), output a (feeds through from F),
 * parameters m (fixed: settable only before initialisation), k and c (tunable: settable in Event Mode).
 * No event indicators, no co-simulation or scheduled-execution interface.
 *
 * Value references (modelDescription.xml): 0 time, 1 x, 2 der(x), 3 v, 4 der(v), 5 F, 6 m, 7 k, 8 c, 9 a.
 *
 * Compiled with WALL defined (tests/fmu_src/SpringWall3), the mass also hits a wall at x = 0: one event
 * indicator z = x (vr 11), and at the event (x <= 0 moving towards the wall) the velocity is reversed and
 * scaled by the restitution e (vr 10, a tunable parameter): v := -e v, a state change the importer reads
 * back after fmi3UpdateDiscreteStates reports valuesOfContinuousStatesChanged.
 *
 * Reference: Modelica Association, Functional Mock-up Interface 3.0.1 (2023): chapter 2 (common concepts:
 * the common functions, getting and setting variable values, getting partial derivatives) and chapter 3
 * (Model Exchange: its functions and state machine, Event Mode and fmi3UpdateDiscreteStates).
 */
#include <stdlib.h>
#include <string.h>

#include "fmi3Functions.h"

#define N_STATES 2
#ifdef WALL
#define TOKEN "{5b0e2d71-8c44-4f1a-a3d6-2e9b7c1f4a08}"
#define N_VARS 12
#define N_EVENTS 1
#else
#define TOKEN "{0d6a7c55-1f3e-4b8a-9c27-5e4f8a1b3d90}"
#define N_VARS 10
#define N_EVENTS 0
#endif

enum { VR_TIME = 0, VR_X = 1, VR_DX = 2, VR_V = 3, VR_DV = 4, VR_F = 5, VR_M = 6, VR_K = 7, VR_C = 8, VR_A = 9 };
enum { VR_E = 10, VR_Z = 11 }; /* with WALL only */

typedef enum { INSTANTIATED, INITIALISATION, EVENT, CONTINUOUS, TERMINATED } Mode;

typedef struct {
    double r[N_VARS]; /* r[VR_TIME] is the time */
    Mode mode;
    fmi3InstanceEnvironment environment;
    fmi3LogMessageCallback logger;
} Instance;

static void start_values(Instance *s) {
    memset(s->r, 0, sizeof(s->r));
    s->r[VR_X] = 0.1;
    s->r[VR_V] = 0.0;
    s->r[VR_F] = 0.0;
    s->r[VR_M] = 1.0;
    s->r[VR_K] = 1.0;
    s->r[VR_C] = 0.1;
#ifdef WALL
    s->r[VR_E] = 0.8;
#endif
}

/* der(x), der(v) and a from the current states, input and parameters */
static void evaluate(Instance *s) {
    double *r = s->r;
    r[VR_DX] = r[VR_V];
    r[VR_DV] = (r[VR_F] - r[VR_K] * r[VR_X] - r[VR_C] * r[VR_V]) / r[VR_M];
    r[VR_A] = r[VR_DV];
#ifdef WALL
    r[VR_Z] = r[VR_X];
#endif
}

static fmi3Status fail(Instance *s, const char *message) {
    if (s != NULL && s->logger != NULL) {
        s->logger(s->environment, fmi3Error, "logStatusError", message);
    }
    return fmi3Error;
}

/* d(unknown)/d(known) for the unknowns der(x), der(v), a, x, v and the knowns x, v, F; -1 on an unknown pair */
static int partial(const Instance *s, fmi3ValueReference unknown, fmi3ValueReference known, double *out) {
    const double *r = s->r;
    if (known != VR_X && known != VR_V && known != VR_F) {
        return -1;
    }
    switch (unknown) {
    case VR_X:
    case VR_V:
        *out = unknown == known ? 1.0 : 0.0;
        return 0;
    case VR_DX:
        *out = known == VR_V ? 1.0 : 0.0;
        return 0;
    case VR_DV:
    case VR_A:
        *out = known == VR_X ? -r[VR_K] / r[VR_M] : known == VR_V ? -r[VR_C] / r[VR_M] : 1.0 / r[VR_M];
        return 0;
    default:
        return -1;
    }
}

/* ---- common functions (FMI 3.0 chapter 2) ---- */
const char *fmi3GetVersion(void) { return fmi3Version; }

fmi3Status fmi3SetDebugLogging(fmi3Instance instance, fmi3Boolean loggingOn, size_t nCategories,
                               const fmi3String categories[]) {
    return instance == NULL ? fmi3Error : fmi3OK;
}

fmi3Instance fmi3InstantiateModelExchange(fmi3String instanceName, fmi3String instantiationToken,
                                          fmi3String resourcePath, fmi3Boolean visible, fmi3Boolean loggingOn,
                                          fmi3InstanceEnvironment instanceEnvironment,
                                          fmi3LogMessageCallback logMessage) {
    if (instantiationToken == NULL || strcmp(instantiationToken, TOKEN) != 0) {
        return NULL; /* only for this model description */
    }
    Instance *s = (Instance *)calloc(1, sizeof(Instance));
    if (s == NULL) {
        return NULL;
    }
    s->environment = instanceEnvironment;
    s->logger = logMessage;
    start_values(s);
    s->mode = INSTANTIATED;
    return s;
}

fmi3Instance fmi3InstantiateCoSimulation(fmi3String instanceName, fmi3String instantiationToken,
                                         fmi3String resourcePath, fmi3Boolean visible, fmi3Boolean loggingOn,
                                         fmi3Boolean eventModeUsed, fmi3Boolean earlyReturnAllowed,
                                         const fmi3ValueReference requiredIntermediateVariables[],
                                         size_t nRequiredIntermediateVariables,
                                         fmi3InstanceEnvironment instanceEnvironment,
                                         fmi3LogMessageCallback logMessage,
                                         fmi3IntermediateUpdateCallback intermediateUpdate) {
    return NULL; /* Model Exchange only */
}

fmi3Instance fmi3InstantiateScheduledExecution(fmi3String instanceName, fmi3String instantiationToken,
                                               fmi3String resourcePath, fmi3Boolean visible,
                                               fmi3Boolean loggingOn, fmi3InstanceEnvironment instanceEnvironment,
                                               fmi3LogMessageCallback logMessage,
                                               fmi3ClockUpdateCallback clockUpdate,
                                               fmi3LockPreemptionCallback lockPreemption,
                                               fmi3UnlockPreemptionCallback unlockPreemption) {
    return NULL; /* Model Exchange only */
}

void fmi3FreeInstance(fmi3Instance instance) { free(instance); }

fmi3Status fmi3EnterInitializationMode(fmi3Instance instance, fmi3Boolean toleranceDefined, fmi3Float64 tolerance,
                                       fmi3Float64 startTime, fmi3Boolean stopTimeDefined, fmi3Float64 stopTime) {
    Instance *s = (Instance *)instance;
    if (s == NULL || s->mode != INSTANTIATED) {
        return fail(s, "fmi3EnterInitializationMode: only after instantiation or fmi3Reset");
    }
    s->r[VR_TIME] = startTime;
    s->mode = INITIALISATION;
    return fmi3OK;
}

fmi3Status fmi3ExitInitializationMode(fmi3Instance instance) {
    Instance *s = (Instance *)instance;
    if (s == NULL || s->mode != INITIALISATION) {
        return fail(s, "fmi3ExitInitializationMode: only in Initialization Mode");
    }
    if (!(s->r[VR_M] > 0.0)) {
        return fail(s, "fmi3ExitInitializationMode: the mass m must be positive");
    }
    evaluate(s);
    s->mode = EVENT; /* Model Exchange: Event Mode after initialisation (chapter 3) */
    return fmi3OK;
}

fmi3Status fmi3EnterEventMode(fmi3Instance instance) {
    Instance *s = (Instance *)instance;
    if (s == NULL || (s->mode != CONTINUOUS && s->mode != EVENT)) {
        return fail(s, "fmi3EnterEventMode: only in Continuous-Time Mode");
    }
    s->mode = EVENT;
    return fmi3OK;
}

fmi3Status fmi3Terminate(fmi3Instance instance) {
    Instance *s = (Instance *)instance;
    if (s == NULL) {
        return fmi3Error;
    }
    s->mode = TERMINATED;
    return fmi3OK;
}

fmi3Status fmi3Reset(fmi3Instance instance) {
    Instance *s = (Instance *)instance;
    if (s == NULL) {
        return fmi3Error;
    }
    start_values(s);
    s->mode = INSTANTIATED;
    return fmi3OK;
}

/* ---- getting and setting variable values (chapter 2) ---- */
fmi3Status fmi3GetFloat64(fmi3Instance instance, const fmi3ValueReference valueReferences[],
                          size_t nValueReferences, fmi3Float64 values[], size_t nValues) {
    Instance *s = (Instance *)instance;
    if (s == NULL) {
        return fmi3Error;
    }
    if (nValues != nValueReferences || (nValueReferences > 0 && (valueReferences == NULL || values == NULL))) {
        return fail(s, "fmi3GetFloat64: expected one value per (scalar) value reference");
    }
    evaluate(s);
    for (size_t i = 0; i < nValueReferences; i++) {
        if (valueReferences[i] >= N_VARS) {
            return fail(s, "fmi3GetFloat64: unknown value reference");
        }
        values[i] = s->r[valueReferences[i]];
    }
    return fmi3OK;
}

fmi3Status fmi3SetFloat64(fmi3Instance instance, const fmi3ValueReference valueReferences[],
                          size_t nValueReferences, const fmi3Float64 values[], size_t nValues) {
    Instance *s = (Instance *)instance;
    if (s == NULL) {
        return fmi3Error;
    }
    if (nValues != nValueReferences || (nValueReferences > 0 && (valueReferences == NULL || values == NULL))) {
        return fail(s, "fmi3SetFloat64: expected one value per (scalar) value reference");
    }
    for (size_t i = 0; i < nValueReferences; i++) {
        fmi3ValueReference ref = valueReferences[i];
        int before_init = s->mode == INSTANTIATED || s->mode == INITIALISATION;
        int ok = 0;
        if (ref == VR_X || ref == VR_V) {
            ok = before_init; /* states with initial="exact"; later fmi3SetContinuousStates */
        } else if (ref == VR_F) {
            ok = s->mode != TERMINATED;
        } else if (ref == VR_M) {
            ok = before_init; /* fixed parameter */
        } else if (ref == VR_K || ref == VR_C || (N_EVENTS > 0 && ref == VR_E)) {
            ok = before_init || s->mode == EVENT; /* tunable parameters */
        }
        if (!ok) {
            return fail(s, "fmi3SetFloat64: variable not settable in this mode");
        }
        s->r[ref] = values[i];
    }
    return fmi3OK;
}

/* this model has no variables of the other types: only empty requests succeed */
#define NO_VARIABLES(name, type)                                                                          \
    fmi3Status name(fmi3Instance instance, const fmi3ValueReference valueReferences[],                   \
                    size_t nValueReferences, type values[], size_t nValues) {                            \
        return nValueReferences == 0 && instance != NULL ? fmi3OK                                          \
                                                          : fail((Instance *)instance, #name ": no such variables"); \
    }

NO_VARIABLES(fmi3GetFloat32, fmi3Float32)
NO_VARIABLES(fmi3GetInt8, fmi3Int8)
NO_VARIABLES(fmi3GetUInt8, fmi3UInt8)
NO_VARIABLES(fmi3GetInt16, fmi3Int16)
NO_VARIABLES(fmi3GetUInt16, fmi3UInt16)
NO_VARIABLES(fmi3GetInt32, fmi3Int32)
NO_VARIABLES(fmi3GetUInt32, fmi3UInt32)
NO_VARIABLES(fmi3GetInt64, fmi3Int64)
NO_VARIABLES(fmi3GetUInt64, fmi3UInt64)
NO_VARIABLES(fmi3GetBoolean, fmi3Boolean)
NO_VARIABLES(fmi3GetString, fmi3String)
NO_VARIABLES(fmi3SetFloat32, const fmi3Float32)
NO_VARIABLES(fmi3SetInt8, const fmi3Int8)
NO_VARIABLES(fmi3SetUInt8, const fmi3UInt8)
NO_VARIABLES(fmi3SetInt16, const fmi3Int16)
NO_VARIABLES(fmi3SetUInt16, const fmi3UInt16)
NO_VARIABLES(fmi3SetInt32, const fmi3Int32)
NO_VARIABLES(fmi3SetUInt32, const fmi3UInt32)
NO_VARIABLES(fmi3SetInt64, const fmi3Int64)
NO_VARIABLES(fmi3SetUInt64, const fmi3UInt64)
NO_VARIABLES(fmi3SetBoolean, const fmi3Boolean)
NO_VARIABLES(fmi3SetString, const fmi3String)

fmi3Status fmi3GetBinary(fmi3Instance instance, const fmi3ValueReference valueReferences[], size_t nValueReferences,
                         size_t valueSizes[], fmi3Binary values[], size_t nValues) {
    return nValueReferences == 0 && instance != NULL ? fmi3OK : fail((Instance *)instance, "fmi3GetBinary: none");
}

fmi3Status fmi3SetBinary(fmi3Instance instance, const fmi3ValueReference valueReferences[], size_t nValueReferences,
                         const size_t valueSizes[], const fmi3Binary values[], size_t nValues) {
    return nValueReferences == 0 && instance != NULL ? fmi3OK : fail((Instance *)instance, "fmi3SetBinary: none");
}

fmi3Status fmi3GetClock(fmi3Instance instance, const fmi3ValueReference valueReferences[], size_t nValueReferences,
                        fmi3Clock values[]) {
    return nValueReferences == 0 && instance != NULL ? fmi3OK : fail((Instance *)instance, "fmi3GetClock: none");
}

fmi3Status fmi3SetClock(fmi3Instance instance, const fmi3ValueReference valueReferences[], size_t nValueReferences,
                        const fmi3Clock values[]) {
    return nValueReferences == 0 && instance != NULL ? fmi3OK : fail((Instance *)instance, "fmi3SetClock: none");
}

/* ---- variable dependencies, FMU state: not provided (optional capabilities) ---- */
fmi3Status fmi3GetNumberOfVariableDependencies(fmi3Instance instance, fmi3ValueReference valueReference,
                                               size_t *nDependencies) {
    return fail((Instance *)instance, "fmi3GetNumberOfVariableDependencies: not provided");
}

fmi3Status fmi3GetVariableDependencies(fmi3Instance instance, fmi3ValueReference dependent,
                                       size_t elementIndicesOfDependent[], fmi3ValueReference independents[],
                                       size_t elementIndicesOfIndependents[], fmi3DependencyKind dependencyKinds[],
                                       size_t nDependencies) {
    return fail((Instance *)instance, "fmi3GetVariableDependencies: not provided");
}

fmi3Status fmi3GetFMUState(fmi3Instance instance, fmi3FMUState *FMUState) {
    return fail((Instance *)instance, "fmi3GetFMUState: canGetAndSetFMUState is false");
}

fmi3Status fmi3SetFMUState(fmi3Instance instance, fmi3FMUState FMUState) {
    return fail((Instance *)instance, "fmi3SetFMUState: canGetAndSetFMUState is false");
}

fmi3Status fmi3FreeFMUState(fmi3Instance instance, fmi3FMUState *FMUState) {
    return fail((Instance *)instance, "fmi3FreeFMUState: canGetAndSetFMUState is false");
}

fmi3Status fmi3SerializedFMUStateSize(fmi3Instance instance, fmi3FMUState FMUState, size_t *size) {
    return fail((Instance *)instance, "fmi3SerializedFMUStateSize: canSerializeFMUState is false");
}

fmi3Status fmi3SerializeFMUState(fmi3Instance instance, fmi3FMUState FMUState, fmi3Byte serializedState[],
                                 size_t size) {
    return fail((Instance *)instance, "fmi3SerializeFMUState: canSerializeFMUState is false");
}

fmi3Status fmi3DeserializeFMUState(fmi3Instance instance, const fmi3Byte serializedState[], size_t size,
                                   fmi3FMUState *FMUState) {
    return fail((Instance *)instance, "fmi3DeserializeFMUState: canSerializeFMUState is false");
}

/* ---- partial derivatives (chapter 2): sensitivity = J seed, J = d(unknowns)/d(knowns) ---- */
fmi3Status fmi3GetDirectionalDerivative(fmi3Instance instance, const fmi3ValueReference unknowns[],
                                        size_t nUnknowns, const fmi3ValueReference knowns[], size_t nKnowns,
                                        const fmi3Float64 seed[], size_t nSeed, fmi3Float64 sensitivity[],
                                        size_t nSensitivity) {
    Instance *s = (Instance *)instance;
    if (s == NULL) {
        return fmi3Error;
    }
    if (nSeed != nKnowns || nSensitivity != nUnknowns) {
        return fail(s, "fmi3GetDirectionalDerivative: expected one seed per known, one sensitivity per unknown");
    }
    for (size_t i = 0; i < nUnknowns; i++) {
        double sum = 0.0;
        for (size_t j = 0; j < nKnowns; j++) {
            double d;
            if (partial(s, unknowns[i], knowns[j], &d) != 0) {
                return fail(s, "fmi3GetDirectionalDerivative: unknowns are der(x), der(v), a, x, v; knowns x, v, F");
            }
            sum += d * seed[j];
        }
        sensitivity[i] = sum;
    }
    return fmi3OK;
}

fmi3Status fmi3GetAdjointDerivative(fmi3Instance instance, const fmi3ValueReference unknowns[], size_t nUnknowns,
                                    const fmi3ValueReference knowns[], size_t nKnowns, const fmi3Float64 seed[],
                                    size_t nSeed, fmi3Float64 sensitivity[], size_t nSensitivity) {
    return fail((Instance *)instance, "fmi3GetAdjointDerivative: providesAdjointDerivatives is false");
}

/* ---- configuration mode and clocks: not used by this model ---- */
fmi3Status fmi3EnterConfigurationMode(fmi3Instance instance) {
    return fail((Instance *)instance, "fmi3EnterConfigurationMode: no structural parameters");
}

fmi3Status fmi3ExitConfigurationMode(fmi3Instance instance) {
    return fail((Instance *)instance, "fmi3ExitConfigurationMode: no structural parameters");
}

fmi3Status fmi3GetIntervalDecimal(fmi3Instance instance, const fmi3ValueReference valueReferences[],
                                  size_t nValueReferences, fmi3Float64 intervals[],
                                  fmi3IntervalQualifier qualifiers[]) {
    return fail((Instance *)instance, "fmi3GetIntervalDecimal: no clocks");
}

fmi3Status fmi3GetIntervalFraction(fmi3Instance instance, const fmi3ValueReference valueReferences[],
                                   size_t nValueReferences, fmi3UInt64 counters[], fmi3UInt64 resolutions[],
                                   fmi3IntervalQualifier qualifiers[]) {
    return fail((Instance *)instance, "fmi3GetIntervalFraction: no clocks");
}

fmi3Status fmi3GetShiftDecimal(fmi3Instance instance, const fmi3ValueReference valueReferences[],
                               size_t nValueReferences, fmi3Float64 shifts[]) {
    return fail((Instance *)instance, "fmi3GetShiftDecimal: no clocks");
}

fmi3Status fmi3GetShiftFraction(fmi3Instance instance, const fmi3ValueReference valueReferences[],
                                size_t nValueReferences, fmi3UInt64 counters[], fmi3UInt64 resolutions[]) {
    return fail((Instance *)instance, "fmi3GetShiftFraction: no clocks");
}

fmi3Status fmi3SetIntervalDecimal(fmi3Instance instance, const fmi3ValueReference valueReferences[],
                                  size_t nValueReferences, const fmi3Float64 intervals[]) {
    return fail((Instance *)instance, "fmi3SetIntervalDecimal: no clocks");
}

fmi3Status fmi3SetIntervalFraction(fmi3Instance instance, const fmi3ValueReference valueReferences[],
                                   size_t nValueReferences, const fmi3UInt64 counters[],
                                   const fmi3UInt64 resolutions[]) {
    return fail((Instance *)instance, "fmi3SetIntervalFraction: no clocks");
}

fmi3Status fmi3SetShiftDecimal(fmi3Instance instance, const fmi3ValueReference valueReferences[],
                               size_t nValueReferences, const fmi3Float64 shifts[]) {
    return fail((Instance *)instance, "fmi3SetShiftDecimal: no clocks");
}

fmi3Status fmi3SetShiftFraction(fmi3Instance instance, const fmi3ValueReference valueReferences[],
                                size_t nValueReferences, const fmi3UInt64 counters[],
                                const fmi3UInt64 resolutions[]) {
    return fail((Instance *)instance, "fmi3SetShiftFraction: no clocks");
}

fmi3Status fmi3EvaluateDiscreteStates(fmi3Instance instance) {
    return instance == NULL ? fmi3Error : fmi3OK; /* no discrete states */
}

/* ---- Event Mode (chapter 3, the Model Exchange state machine) ---- */
fmi3Status fmi3UpdateDiscreteStates(fmi3Instance instance, fmi3Boolean *discreteStatesNeedUpdate,
                                    fmi3Boolean *terminateSimulation, fmi3Boolean *nominalsOfContinuousStatesChanged,
                                    fmi3Boolean *valuesOfContinuousStatesChanged, fmi3Boolean *nextEventTimeDefined,
                                    fmi3Float64 *nextEventTime) {
    Instance *s = (Instance *)instance;
    if (s == NULL || s->mode != EVENT) {
        return fail(s, "fmi3UpdateDiscreteStates: only in Event Mode");
    }
    evaluate(s);
    *discreteStatesNeedUpdate = fmi3False;
    *terminateSimulation = fmi3False;
    *nominalsOfContinuousStatesChanged = fmi3False;
    *valuesOfContinuousStatesChanged = fmi3False;
#ifdef WALL
    if (s->r[VR_X] <= 0.0 && s->r[VR_V] < 0.0) { /* at the wall, moving into it: the bounce */
        s->r[VR_V] = -s->r[VR_E] * s->r[VR_V];
        *valuesOfContinuousStatesChanged = fmi3True;
        evaluate(s);
    }
#endif
    *nextEventTimeDefined = fmi3False;
    *nextEventTime = 0.0;
    return fmi3OK;
}

/* ---- Model Exchange (chapter 3) ---- */
fmi3Status fmi3EnterContinuousTimeMode(fmi3Instance instance) {
    Instance *s = (Instance *)instance;
    if (s == NULL || s->mode != EVENT) {
        return fail(s, "fmi3EnterContinuousTimeMode: only in Event Mode");
    }
    s->mode = CONTINUOUS;
    return fmi3OK;
}

fmi3Status fmi3CompletedIntegratorStep(fmi3Instance instance, fmi3Boolean noSetFMUStatePriorToCurrentPoint,
                                       fmi3Boolean *enterEventMode, fmi3Boolean *terminateSimulation) {
    Instance *s = (Instance *)instance;
    if (s == NULL || s->mode != CONTINUOUS || enterEventMode == NULL || terminateSimulation == NULL) {
        return fail(s, "fmi3CompletedIntegratorStep: only in Continuous-Time Mode");
    }
    *enterEventMode = fmi3False;
    *terminateSimulation = fmi3False;
    return fmi3OK;
}

fmi3Status fmi3SetTime(fmi3Instance instance, fmi3Float64 time) {
    Instance *s = (Instance *)instance;
    if (s == NULL || s->mode == TERMINATED) {
        return fail(s, "fmi3SetTime: not after fmi3Terminate");
    }
    s->r[VR_TIME] = time;
    return fmi3OK;
}

fmi3Status fmi3SetContinuousStates(fmi3Instance instance, const fmi3Float64 continuousStates[],
                                   size_t nContinuousStates) {
    Instance *s = (Instance *)instance;
    if (s == NULL || nContinuousStates != N_STATES || continuousStates == NULL || s->mode == TERMINATED) {
        return fail(s, "fmi3SetContinuousStates: expected 2 states");
    }
    s->r[VR_X] = continuousStates[0];
    s->r[VR_V] = continuousStates[1];
    return fmi3OK;
}

fmi3Status fmi3GetContinuousStateDerivatives(fmi3Instance instance, fmi3Float64 derivatives[],
                                             size_t nContinuousStates) {
    Instance *s = (Instance *)instance;
    if (s == NULL || nContinuousStates != N_STATES || derivatives == NULL) {
        return fail(s, "fmi3GetContinuousStateDerivatives: expected 2 states");
    }
    evaluate(s);
    derivatives[0] = s->r[VR_DX];
    derivatives[1] = s->r[VR_DV];
    return fmi3OK;
}

fmi3Status fmi3GetEventIndicators(fmi3Instance instance, fmi3Float64 eventIndicators[], size_t nEventIndicators) {
    Instance *s = (Instance *)instance;
    if (s == NULL || nEventIndicators != N_EVENTS || (N_EVENTS > 0 && eventIndicators == NULL)) {
        return fail(s, "fmi3GetEventIndicators: expected numberOfEventIndicators values");
    }
#ifdef WALL
    evaluate(s);
    eventIndicators[0] = s->r[VR_Z];
#endif
    return fmi3OK;
}

fmi3Status fmi3GetContinuousStates(fmi3Instance instance, fmi3Float64 continuousStates[],
                                   size_t nContinuousStates) {
    Instance *s = (Instance *)instance;
    if (s == NULL || nContinuousStates != N_STATES || continuousStates == NULL) {
        return fail(s, "fmi3GetContinuousStates: expected 2 states");
    }
    continuousStates[0] = s->r[VR_X];
    continuousStates[1] = s->r[VR_V];
    return fmi3OK;
}

fmi3Status fmi3GetNominalsOfContinuousStates(fmi3Instance instance, fmi3Float64 nominals[],
                                             size_t nContinuousStates) {
    if (instance == NULL || nContinuousStates != N_STATES || nominals == NULL) {
        return fail((Instance *)instance, "fmi3GetNominalsOfContinuousStates: expected 2 states");
    }
    nominals[0] = 1.0;
    nominals[1] = 1.0;
    return fmi3OK;
}

fmi3Status fmi3GetNumberOfEventIndicators(fmi3Instance instance, size_t *nEventIndicators) {
    if (instance == NULL || nEventIndicators == NULL) {
        return fmi3Error;
    }
    *nEventIndicators = N_EVENTS;
    return fmi3OK;
}

fmi3Status fmi3GetNumberOfContinuousStates(fmi3Instance instance, size_t *nContinuousStates) {
    if (instance == NULL || nContinuousStates == NULL) {
        return fmi3Error;
    }
    *nContinuousStates = N_STATES;
    return fmi3OK;
}

/* ---- Co-Simulation and Scheduled Execution: not offered (no such elements in the description) ---- */
fmi3Status fmi3EnterStepMode(fmi3Instance instance) {
    return fail((Instance *)instance, "fmi3EnterStepMode: Model Exchange only");
}

fmi3Status fmi3GetOutputDerivatives(fmi3Instance instance, const fmi3ValueReference valueReferences[],
                                    size_t nValueReferences, const fmi3Int32 orders[], fmi3Float64 values[],
                                    size_t nValues) {
    return fail((Instance *)instance, "fmi3GetOutputDerivatives: Model Exchange only");
}

fmi3Status fmi3DoStep(fmi3Instance instance, fmi3Float64 currentCommunicationPoint,
                      fmi3Float64 communicationStepSize, fmi3Boolean noSetFMUStatePriorToCurrentPoint,
                      fmi3Boolean *eventHandlingNeeded, fmi3Boolean *terminateSimulation, fmi3Boolean *earlyReturn,
                      fmi3Float64 *lastSuccessfulTime) {
    return fail((Instance *)instance, "fmi3DoStep: Model Exchange only");
}

fmi3Status fmi3ActivateModelPartition(fmi3Instance instance, fmi3ValueReference clockReference,
                                      fmi3Float64 activationTime) {
    return fail((Instance *)instance, "fmi3ActivateModelPartition: Model Exchange only");
}
