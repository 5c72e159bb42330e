package trainer

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/fulgur-ml/fulgur/module"
)

// Hooks and abilities are found by their interfaces, so a method named as
// one with another signature (a context forgotten, Lightning's arguments,
// a ValidationStep returning a loss as TrainingStep does) compiles and is
// never called. These tables name every method the trainer looks for on
// callbacks, loggers and modules; wrongSignatures reports the ones a value
// has under those names with other signatures.

var callbackInterfaces = []reflect.Type{
	reflect.TypeFor[FitStartHook](), reflect.TypeFor[FitEndHook](),
	reflect.TypeFor[SanityCheckStartHook](), reflect.TypeFor[SanityCheckEndHook](),
	reflect.TypeFor[TrainStartHook](), reflect.TypeFor[TrainEndHook](),
	reflect.TypeFor[TrainEpochStartHook](), reflect.TypeFor[TrainEpochEndHook](),
	reflect.TypeFor[TrainBatchStartHook](), reflect.TypeFor[TrainBatchEndHook](),
	reflect.TypeFor[BeforeBackwardHook](), reflect.TypeFor[BeforeOptimizerStepHook](), reflect.TypeFor[AfterOptimizerStepHook](),
	reflect.TypeFor[ValidationStartHook](), reflect.TypeFor[ValidationEpochStartHook](),
	reflect.TypeFor[ValidationBatchStartHook](), reflect.TypeFor[ValidationBatchEndHook](),
	reflect.TypeFor[ValidationEpochEndHook](), reflect.TypeFor[ValidationEndHook](),
	reflect.TypeFor[TestStartHook](), reflect.TypeFor[TestEpochStartHook](),
	reflect.TypeFor[TestBatchStartHook](), reflect.TypeFor[TestBatchEndHook](),
	reflect.TypeFor[TestEpochEndHook](), reflect.TypeFor[TestEndHook](),
	reflect.TypeFor[PredictStartHook](), reflect.TypeFor[PredictEpochStartHook](),
	reflect.TypeFor[PredictBatchStartHook](), reflect.TypeFor[PredictBatchEndHook](),
	reflect.TypeFor[PredictEpochEndHook](), reflect.TypeFor[PredictEndHook](),
	reflect.TypeFor[ExceptionHook](),
	reflect.TypeFor[SetupHook](), reflect.TypeFor[TeardownHook](),
	reflect.TypeFor[AfterBackwardHook](), reflect.TypeFor[BeforeZeroGradHook](),
	reflect.TypeFor[AccumulationScheduler](), reflect.TypeFor[ProgressDisplay](),
	reflect.TypeFor[StepEndStopper](), reflect.TypeFor[LayerShapesUser](), reflect.TypeFor[Stateful](),
	reflect.TypeFor[ReadyChecker](),
}

var loggerInterfaces = []reflect.Type{reflect.TypeFor[Resumer](), reflect.TypeFor[RowResumer](), reflect.TypeFor[ReadyChecker]()}

var moduleInterfaces = []reflect.Type{
	reflect.TypeFor[module.Validator](), reflect.TypeFor[module.Tester](), reflect.TypeFor[module.Predictor](),
	reflect.TypeFor[module.OptimizerConfigurer](), reflect.TypeFor[module.HParamser](),
	reflect.TypeFor[module.FitStarter](), reflect.TypeFor[module.FitEnder](),
	reflect.TypeFor[module.TrainStarter](), reflect.TypeFor[module.TrainEnder](),
	reflect.TypeFor[module.TrainEpochStarter](), reflect.TypeFor[module.TrainEpochEnder](),
	reflect.TypeFor[module.TrainBatchStarter](), reflect.TypeFor[module.TrainBatchEnder](),
	reflect.TypeFor[module.BeforeBackwarder](), reflect.TypeFor[module.BeforeOptimizerStepper](), reflect.TypeFor[module.AfterOptimizerStepper](),
	reflect.TypeFor[module.ValidationStarter](), reflect.TypeFor[module.ValidationEnder](),
	reflect.TypeFor[module.ValidationEpochStarter](), reflect.TypeFor[module.ValidationEpochEnder](),
	reflect.TypeFor[module.ValidationBatchStarter](), reflect.TypeFor[module.ValidationBatchEnder](),
	reflect.TypeFor[module.TestStarter](), reflect.TypeFor[module.TestEnder](),
	reflect.TypeFor[module.TestEpochStarter](), reflect.TypeFor[module.TestEpochEnder](),
	reflect.TypeFor[module.TestBatchStarter](), reflect.TypeFor[module.TestBatchEnder](),
	reflect.TypeFor[module.PredictStarter](), reflect.TypeFor[module.PredictEnder](),
	reflect.TypeFor[module.PredictEpochStarter](), reflect.TypeFor[module.PredictEpochEnder](),
	reflect.TypeFor[module.PredictBatchStarter](), reflect.TypeFor[module.PredictBatchEnder](),
	reflect.TypeFor[module.SetUpper](), reflect.TypeFor[module.TearDowner](),
	reflect.TypeFor[module.CheckpointSaver](), reflect.TypeFor[module.CheckpointLoader](),
	reflect.TypeFor[module.AfterBackwarder](), reflect.TypeFor[module.BeforeZeroGrader](),
	reflect.TypeFor[StepEndStopper](),
}

// wrongSignatures lists, one sentence each, the methods of v named as a
// method of one of ifaces whose signature differs (nil when none does).
func wrongSignatures(v any, ifaces []reflect.Type) []string {
	vt := reflect.TypeOf(v)
	if vt == nil {
		return nil
	}
	var out []string
	for _, it := range ifaces {
		if vt.Implements(it) {
			continue
		}
		if vt.Kind() != reflect.Pointer && reflect.PointerTo(vt).Implements(it) {
			// The methods are the pointer's: a value passed never has them.
			out = append(out, fmt.Sprintf("%T's %s has a pointer receiver, so the %T passed has no such method and it would never be called: pass a pointer (&%s{...})",
				v, it.Method(0).Name, v, vt.Name()))
			continue
		}
		for i := range it.NumMethod() {
			want := it.Method(i)
			got, ok := vt.MethodByName(want.Name)
			if !ok {
				continue
			}
			// got.Type has the receiver first; want.Type has none.
			in := make([]reflect.Type, 0, got.Type.NumIn())
			for j := 1; j < got.Type.NumIn(); j++ {
				in = append(in, got.Type.In(j))
			}
			outs := make([]reflect.Type, got.Type.NumOut())
			for j := range outs {
				outs[j] = got.Type.Out(j)
			}
			have := reflect.FuncOf(in, outs, got.Type.IsVariadic())
			if have == want.Type {
				continue // another method of it is the one that differs
			}
			out = append(out, fmt.Sprintf("%T has %s %s, but the trainer calls %s as %s (%s), and one of another signature never: change it to that one, or rename it if it is a method of your own and not this hook",
				v, want.Name, have, want.Name, want.Type, it))
		}
	}
	return out
}

// checkModule is the error of a module with methods named as its hooks or
// optional steps but of other signatures; call names the Trainer method.
func checkModule(call string, m module.Module) error {
	msgs := wrongSignatures(m, moduleInterfaces)
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%s: the module: %s", call, strings.Join(msgs, "; "))
}
