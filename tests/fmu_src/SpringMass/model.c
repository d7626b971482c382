/*
 * SpringMass: a minimal FMI 2.0 Model Exchange FMU written for twinfer's tests (issue #56).
 *
 * One mass on a spring and a damper to the ground, pushed by an input force:
 *
 *     der(x) = v,    der(v) = a = (F - k x - c v) / m
 *
 * States x and v (both also outputs), input F (continuous), output a (feeds through from F),
 * parameters m (fixed: settable only before initialisation), k and c (tunable: settable in Event Mode).
 * No event indicators, no directional derivatives. Co-Simulation too (a second interface of the same
 * model): fmi2DoStep integrates the equations with its own solver (classic Runge-Kutta, COSIM_SUBSTEPS steps
 * per communication step, the input held), and the FMU state can be got, set and freed
 * (canGetAndSetFMUstate in <CoSimulation> only), so an importer can take a communication step again.
 *
 * The value references equal the variables' 1-based indices in modelDescription.xml:
 * 1 x, 2 der(x), 3 v, 4 der(v), 5 F, 6 m, 7 k, 8 c, 9 a.
 *
 * Reference: Modelica Association, Functional Mock-up Interface 2.0.4 (2022): the common functions
 * (section 2.1), the Model Exchange functions and their state machine (sections 3.2.1-3.2.3).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fmi2Functions.h"

#define GUID "{6f1e3c9a-2b7d-4e58-9a41-3c5d7e9f0b12}"
#define N_VARS 10 /* index 0 unused */
#define N_STATES 2
#define COSIM_SUBSTEPS 10

enum { VR_X = 1, VR_DX = 2, VR_V = 3, VR_DV = 4, VR_F = 5, VR_M = 6, VR_K = 7, VR_C = 8, VR_A = 9 };

typedef enum { INSTANTIATED, INITIALISATION, EVENT, CONTINUOUS, TERMINATED } Mode;

typedef struct {
    double r[N_VARS];
    double time;
    Mode mode;
    int cosim; /* instantiated as fmi2CoSimulation */
    fmi2CallbackFunctions callbacks;
    char *name;
} Instance;

static void start_values(Instance *s) {
    memset(s->r, 0, sizeof(s->r));
    s->r[VR_X] = 0.1;
    s->r[VR_V] = 0.0;
    s->r[VR_F] = 0.0;
    s->r[VR_M] = 1.0;
    s->r[VR_K] = 1.0;
    s->r[VR_C] = 0.1;
    s->time = 0.0;
}

/* der(x), der(v) and a from the current states, input and parameters */
static void evaluate(Instance *s) {
    double *r = s->r;
    r[VR_DX] = r[VR_V];
    r[VR_DV] = (r[VR_F] - r[VR_K] * r[VR_X] - r[VR_C] * r[VR_V]) / r[VR_M];
    r[VR_A] = r[VR_DV];
}

static fmi2Status fail(Instance *s, const char *message) {
    if (s != NULL && s->callbacks.logger != NULL) {
        s->callbacks.logger(s->callbacks.componentEnvironment, s->name, fmi2Error, "logError", message);
    }
    return fmi2Error;
}

/* ---- common functions (FMI 2.0.4 section 2.1) ---- */
const char *fmi2GetTypesPlatform(void) { return fmi2TypesPlatform; }

const char *fmi2GetVersion(void) { return fmi2Version; }

fmi2Status fmi2SetDebugLogging(fmi2Component c, fmi2Boolean loggingOn, size_t nCategories,
                               const fmi2String categories[]) {
    (void)loggingOn;
    (void)nCategories;
    (void)categories;
    return c == NULL ? fmi2Error : fmi2OK;
}

fmi2Component fmi2Instantiate(fmi2String instanceName, fmi2Type fmuType, fmi2String fmuGUID,
                              fmi2String fmuResourceLocation, const fmi2CallbackFunctions *functions,
                              fmi2Boolean visible, fmi2Boolean loggingOn) {
    (void)fmuResourceLocation;
    (void)visible;
    (void)loggingOn;
    if ((fmuType != fmi2ModelExchange && fmuType != fmi2CoSimulation) || fmuGUID == NULL ||
        strcmp(fmuGUID, GUID) != 0) {
        return NULL; /* only for this model description */
    }
    Instance *s = (Instance *)calloc(1, sizeof(Instance));
    if (s == NULL) {
        return NULL;
    }
    if (functions != NULL) {
        s->callbacks = *functions;
    }
    const char *name = instanceName != NULL ? instanceName : "SpringMass";
    s->name = (char *)malloc(strlen(name) + 1);
    if (s->name == NULL) {
        free(s);
        return NULL;
    }
    strcpy(s->name, name);
    start_values(s);
    s->mode = INSTANTIATED;
    s->cosim = fmuType == fmi2CoSimulation;
    return s;
}

void fmi2FreeInstance(fmi2Component c) {
    Instance *s = (Instance *)c;
    if (s != NULL) {
        free(s->name);
        free(s);
    }
}

fmi2Status fmi2SetupExperiment(fmi2Component c, fmi2Boolean toleranceDefined, fmi2Real tolerance,
                               fmi2Real startTime, fmi2Boolean stopTimeDefined, fmi2Real stopTime) {
    Instance *s = (Instance *)c;
    (void)toleranceDefined;
    (void)tolerance;
    (void)stopTimeDefined;
    (void)stopTime;
    if (s == NULL || s->mode != INSTANTIATED) {
        return fail(s, "fmi2SetupExperiment: only after fmi2Instantiate or fmi2Reset");
    }
    s->time = startTime;
    return fmi2OK;
}

fmi2Status fmi2EnterInitializationMode(fmi2Component c) {
    Instance *s = (Instance *)c;
    if (s == NULL || s->mode != INSTANTIATED) {
        return fail(s, "fmi2EnterInitializationMode: only after fmi2Instantiate or fmi2Reset");
    }
    s->mode = INITIALISATION;
    return fmi2OK;
}

fmi2Status fmi2ExitInitializationMode(fmi2Component c) {
    Instance *s = (Instance *)c;
    if (s == NULL || s->mode != INITIALISATION) {
        return fail(s, "fmi2ExitInitializationMode: only in Initialization Mode");
    }
    if (!(s->r[VR_M] > 0.0)) {
        return fail(s, "fmi2ExitInitializationMode: the mass m must be positive");
    }
    evaluate(s);
    s->mode = EVENT;
    return fmi2OK;
}

fmi2Status fmi2Terminate(fmi2Component c) {
    Instance *s = (Instance *)c;
    if (s == NULL) {
        return fmi2Error;
    }
    s->mode = TERMINATED;
    return fmi2OK;
}

fmi2Status fmi2Reset(fmi2Component c) {
    Instance *s = (Instance *)c;
    if (s == NULL) {
        return fmi2Error;
    }
    start_values(s);
    s->mode = INSTANTIATED;
    return fmi2OK;
}

fmi2Status fmi2GetReal(fmi2Component c, const fmi2ValueReference vr[], size_t nvr, fmi2Real value[]) {
    Instance *s = (Instance *)c;
    if (s == NULL) {
        return fmi2Error;
    }
    if (nvr > 0 && (vr == NULL || value == NULL)) {
        return fail(s, "fmi2GetReal: null arrays");
    }
    evaluate(s);
    for (size_t i = 0; i < nvr; i++) {
        if (vr[i] < 1 || vr[i] >= N_VARS) {
            return fail(s, "fmi2GetReal: unknown value reference");
        }
        value[i] = s->r[vr[i]];
    }
    return fmi2OK;
}

fmi2Status fmi2SetReal(fmi2Component c, const fmi2ValueReference vr[], size_t nvr, const fmi2Real value[]) {
    Instance *s = (Instance *)c;
    if (s == NULL) {
        return fmi2Error;
    }
    if (nvr > 0 && (vr == NULL || value == NULL)) {
        return fail(s, "fmi2SetReal: null arrays");
    }
    for (size_t i = 0; i < nvr; i++) {
        fmi2ValueReference ref = vr[i];
        int before_init = s->mode == INSTANTIATED || s->mode == INITIALISATION;
        int ok = 0;
        if (ref == VR_X || ref == VR_V) {
            ok = before_init; /* states with initial="exact": their start values; later SetContinuousStates */
        } else if (ref == VR_F) {
            ok = s->mode != TERMINATED;
        } else if (ref == VR_M) {
            ok = before_init; /* fixed parameter (section 2.2.7) */
        } else if (ref == VR_K || ref == VR_C) {
            ok = before_init || s->mode == EVENT; /* tunable parameters */
        }
        if (!ok) {
            return fail(s, "fmi2SetReal: variable not settable in this mode");
        }
        s->r[ref] = value[i];
    }
    return fmi2OK;
}

fmi2Status fmi2GetInteger(fmi2Component c, const fmi2ValueReference vr[], size_t nvr, fmi2Integer value[]) {
    (void)vr;
    (void)value;
    return nvr == 0 && c != NULL ? fmi2OK : fail((Instance *)c, "fmi2GetInteger: no integer variables");
}

fmi2Status fmi2GetBoolean(fmi2Component c, const fmi2ValueReference vr[], size_t nvr, fmi2Boolean value[]) {
    (void)vr;
    (void)value;
    return nvr == 0 && c != NULL ? fmi2OK : fail((Instance *)c, "fmi2GetBoolean: no boolean variables");
}

fmi2Status fmi2GetString(fmi2Component c, const fmi2ValueReference vr[], size_t nvr, fmi2String value[]) {
    (void)vr;
    (void)value;
    return nvr == 0 && c != NULL ? fmi2OK : fail((Instance *)c, "fmi2GetString: no string variables");
}

fmi2Status fmi2SetInteger(fmi2Component c, const fmi2ValueReference vr[], size_t nvr,
                          const fmi2Integer value[]) {
    (void)vr;
    (void)value;
    return nvr == 0 && c != NULL ? fmi2OK : fail((Instance *)c, "fmi2SetInteger: no integer variables");
}

fmi2Status fmi2SetBoolean(fmi2Component c, const fmi2ValueReference vr[], size_t nvr,
                          const fmi2Boolean value[]) {
    (void)vr;
    (void)value;
    return nvr == 0 && c != NULL ? fmi2OK : fail((Instance *)c, "fmi2SetBoolean: no boolean variables");
}

fmi2Status fmi2SetString(fmi2Component c, const fmi2ValueReference vr[], size_t nvr, const fmi2String value[]) {
    (void)vr;
    (void)value;
    return nvr == 0 && c != NULL ? fmi2OK : fail((Instance *)c, "fmi2SetString: no string variables");
}

/* ---- the FMU state: a copy of the instance (Co-Simulation declares canGetAndSetFMUstate) ---- */
fmi2Status fmi2GetFMUstate(fmi2Component c, fmi2FMUstate *FMUstate) {
    Instance *s = (Instance *)c;
    if (s == NULL || FMUstate == NULL) {
        return fmi2Error;
    }
    Instance *copy = *FMUstate != NULL ? (Instance *)*FMUstate : (Instance *)malloc(sizeof(Instance));
    if (copy == NULL) {
        return fail(s, "fmi2GetFMUstate: out of memory");
    }
    memcpy(copy->r, s->r, sizeof(s->r));
    copy->time = s->time;
    copy->mode = s->mode;
    *FMUstate = copy;
    return fmi2OK;
}

fmi2Status fmi2SetFMUstate(fmi2Component c, fmi2FMUstate FMUstate) {
    Instance *s = (Instance *)c;
    const Instance *saved = (const Instance *)FMUstate;
    if (s == NULL || saved == NULL) {
        return fail(s, "fmi2SetFMUstate: expected a state from fmi2GetFMUstate");
    }
    memcpy(s->r, saved->r, sizeof(s->r));
    s->time = saved->time;
    s->mode = saved->mode;
    return fmi2OK;
}

fmi2Status fmi2FreeFMUstate(fmi2Component c, fmi2FMUstate *FMUstate) {
    if (c == NULL || FMUstate == NULL) {
        return fmi2Error;
    }
    free(*FMUstate);
    *FMUstate = NULL;
    return fmi2OK;
}

/* ---- optional capabilities this FMU does not declare: each an error (section 2.1.8, 2.1.9) ---- */
fmi2Status fmi2SerializedFMUstateSize(fmi2Component c, fmi2FMUstate FMUstate, size_t *size) {
    (void)FMUstate;
    (void)size;
    return fail((Instance *)c, "fmi2SerializedFMUstateSize: canSerializeFMUstate is false");
}

fmi2Status fmi2SerializeFMUstate(fmi2Component c, fmi2FMUstate FMUstate, fmi2Byte serializedState[],
                                 size_t size) {
    (void)FMUstate;
    (void)serializedState;
    (void)size;
    return fail((Instance *)c, "fmi2SerializeFMUstate: canSerializeFMUstate is false");
}

fmi2Status fmi2DeSerializeFMUstate(fmi2Component c, const fmi2Byte serializedState[], size_t size,
                                   fmi2FMUstate *FMUstate) {
    (void)serializedState;
    (void)size;
    (void)FMUstate;
    return fail((Instance *)c, "fmi2DeSerializeFMUstate: canSerializeFMUstate is false");
}

fmi2Status fmi2GetDirectionalDerivative(fmi2Component c, const fmi2ValueReference vUnknown_ref[],
                                        size_t nUnknown, const fmi2ValueReference vKnown_ref[], size_t nKnown,
                                        const fmi2Real dvKnown[], fmi2Real dvUnknown[]) {
    (void)vUnknown_ref;
    (void)nUnknown;
    (void)vKnown_ref;
    (void)nKnown;
    (void)dvKnown;
    (void)dvUnknown;
    return fail((Instance *)c, "fmi2GetDirectionalDerivative: providesDirectionalDerivative is false");
}

/* ---- Model Exchange (section 3.2) ---- */
fmi2Status fmi2EnterEventMode(fmi2Component c) {
    Instance *s = (Instance *)c;
    if (s == NULL || (s->mode != CONTINUOUS && s->mode != EVENT)) {
        return fail(s, "fmi2EnterEventMode: only in Continuous-Time Mode");
    }
    s->mode = EVENT;
    return fmi2OK;
}

fmi2Status fmi2NewDiscreteStates(fmi2Component c, fmi2EventInfo *eventInfo) {
    Instance *s = (Instance *)c;
    if (s == NULL || s->mode != EVENT || eventInfo == NULL) {
        return fail(s, "fmi2NewDiscreteStates: only in Event Mode");
    }
    evaluate(s);
    eventInfo->newDiscreteStatesNeeded = fmi2False;
    eventInfo->terminateSimulation = fmi2False;
    eventInfo->nominalsOfContinuousStatesChanged = fmi2False;
    eventInfo->valuesOfContinuousStatesChanged = fmi2False;
    eventInfo->nextEventTimeDefined = fmi2False;
    eventInfo->nextEventTime = 0.0;
    return fmi2OK;
}

fmi2Status fmi2EnterContinuousTimeMode(fmi2Component c) {
    Instance *s = (Instance *)c;
    if (s == NULL || s->mode != EVENT) {
        return fail(s, "fmi2EnterContinuousTimeMode: only in Event Mode");
    }
    s->mode = CONTINUOUS;
    return fmi2OK;
}

fmi2Status fmi2CompletedIntegratorStep(fmi2Component c, fmi2Boolean noSetFMUStatePriorToCurrentPoint,
                                       fmi2Boolean *enterEventMode, fmi2Boolean *terminateSimulation) {
    Instance *s = (Instance *)c;
    (void)noSetFMUStatePriorToCurrentPoint;
    if (s == NULL || s->mode != CONTINUOUS || enterEventMode == NULL || terminateSimulation == NULL) {
        return fail(s, "fmi2CompletedIntegratorStep: only in Continuous-Time Mode");
    }
    *enterEventMode = fmi2False;
    *terminateSimulation = fmi2False;
    return fmi2OK;
}

fmi2Status fmi2SetTime(fmi2Component c, fmi2Real time) {
    Instance *s = (Instance *)c;
    if (s == NULL || s->mode == TERMINATED) {
        return fail(s, "fmi2SetTime: not after fmi2Terminate");
    }
    s->time = time;
    return fmi2OK;
}

fmi2Status fmi2SetContinuousStates(fmi2Component c, const fmi2Real x[], size_t nx) {
    Instance *s = (Instance *)c;
    if (s == NULL || nx != N_STATES || x == NULL || s->mode == TERMINATED) {
        return fail(s, "fmi2SetContinuousStates: expected 2 states");
    }
    s->r[VR_X] = x[0];
    s->r[VR_V] = x[1];
    return fmi2OK;
}

fmi2Status fmi2GetDerivatives(fmi2Component c, fmi2Real derivatives[], size_t nx) {
    Instance *s = (Instance *)c;
    if (s == NULL || nx != N_STATES || derivatives == NULL) {
        return fail(s, "fmi2GetDerivatives: expected 2 states");
    }
    evaluate(s);
    derivatives[0] = s->r[VR_DX];
    derivatives[1] = s->r[VR_DV];
    return fmi2OK;
}

fmi2Status fmi2GetEventIndicators(fmi2Component c, fmi2Real eventIndicators[], size_t ni) {
    (void)eventIndicators;
    return ni == 0 && c != NULL ? fmi2OK : fail((Instance *)c, "fmi2GetEventIndicators: none declared");
}

fmi2Status fmi2GetContinuousStates(fmi2Component c, fmi2Real x[], size_t nx) {
    Instance *s = (Instance *)c;
    if (s == NULL || nx != N_STATES || x == NULL) {
        return fail(s, "fmi2GetContinuousStates: expected 2 states");
    }
    x[0] = s->r[VR_X];
    x[1] = s->r[VR_V];
    return fmi2OK;
}

fmi2Status fmi2GetNominalsOfContinuousStates(fmi2Component c, fmi2Real x_nominal[], size_t nx) {
    if (c == NULL || nx != N_STATES || x_nominal == NULL) {
        return fail((Instance *)c, "fmi2GetNominalsOfContinuousStates: expected 2 states");
    }
    x_nominal[0] = 1.0;
    x_nominal[1] = 1.0;
    return fmi2OK;
}

/* ---- Co-Simulation (FMI 2.0.4 section 4): fmi2DoStep with the input held; no input derivatives ---- */
fmi2Status fmi2SetRealInputDerivatives(fmi2Component c, const fmi2ValueReference vr[], size_t nvr,
                                       const fmi2Integer order[], const fmi2Real value[]) {
    (void)vr;
    (void)nvr;
    (void)order;
    (void)value;
    return fail((Instance *)c, "fmi2SetRealInputDerivatives: Model Exchange only");
}

fmi2Status fmi2GetRealOutputDerivatives(fmi2Component c, const fmi2ValueReference vr[], size_t nvr,
                                        const fmi2Integer order[], fmi2Real value[]) {
    (void)vr;
    (void)nvr;
    (void)order;
    (void)value;
    return fail((Instance *)c, "fmi2GetRealOutputDerivatives: Model Exchange only");
}

/* one classic Runge-Kutta step of h from the current states, the input and parameters held */
static void rk4(Instance *s, double h) {
    double *r = s->r, x = r[VR_X], v = r[VR_V], k[4][2];
    for (int i = 0; i < 4; i++) {
        double w = i == 0 ? 0.0 : (i == 3 ? h : 0.5 * h);
        r[VR_X] = x + w * (i ? k[i - 1][0] : 0.0);
        r[VR_V] = v + w * (i ? k[i - 1][1] : 0.0);
        evaluate(s);
        k[i][0] = r[VR_DX];
        k[i][1] = r[VR_DV];
    }
    r[VR_X] = x + h / 6.0 * (k[0][0] + 2.0 * k[1][0] + 2.0 * k[2][0] + k[3][0]);
    r[VR_V] = v + h / 6.0 * (k[0][1] + 2.0 * k[1][1] + 2.0 * k[2][1] + k[3][1]);
    evaluate(s);
}

fmi2Status fmi2DoStep(fmi2Component c, fmi2Real currentCommunicationPoint, fmi2Real communicationStepSize,
                      fmi2Boolean noSetFMUStatePriorToCurrentPoint) {
    Instance *s = (Instance *)c;
    (void)noSetFMUStatePriorToCurrentPoint;
    if (s == NULL || !s->cosim || s->mode != EVENT) {
        return fail(s, "fmi2DoStep: only in a Co-Simulation instance after initialisation");
    }
    if (!(communicationStepSize > 0.0) || fabs(currentCommunicationPoint - s->time) > 1e-9 * (1.0 + fabs(s->time))) {
        return fail(s, "fmi2DoStep: expected a positive step from the instance's own time");
    }
    double h = communicationStepSize / COSIM_SUBSTEPS;
    for (int i = 0; i < COSIM_SUBSTEPS; i++) {
        rk4(s, h);
    }
    s->time = currentCommunicationPoint + communicationStepSize;
    return fmi2OK;
}

fmi2Status fmi2CancelStep(fmi2Component c) { return fail((Instance *)c, "fmi2CancelStep: Model Exchange only"); }

fmi2Status fmi2GetStatus(fmi2Component c, const fmi2StatusKind s, fmi2Status *value) {
    (void)s;
    (void)value;
    return fail((Instance *)c, "fmi2GetStatus: Model Exchange only");
}

fmi2Status fmi2GetRealStatus(fmi2Component c, const fmi2StatusKind s, fmi2Real *value) {
    (void)s;
    (void)value;
    return fail((Instance *)c, "fmi2GetRealStatus: Model Exchange only");
}

fmi2Status fmi2GetIntegerStatus(fmi2Component c, const fmi2StatusKind s, fmi2Integer *value) {
    (void)s;
    (void)value;
    return fail((Instance *)c, "fmi2GetIntegerStatus: Model Exchange only");
}

fmi2Status fmi2GetBooleanStatus(fmi2Component c, const fmi2StatusKind s, fmi2Boolean *value) {
    (void)s;
    (void)value;
    return fail((Instance *)c, "fmi2GetBooleanStatus: Model Exchange only");
}

fmi2Status fmi2GetStringStatus(fmi2Component c, const fmi2StatusKind s, fmi2String *value) {
    (void)s;
    (void)value;
    return fail((Instance *)c, "fmi2GetStringStatus: Model Exchange only");
}
