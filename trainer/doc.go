// Package trainer runs a module.Module: Fit, Validate, Test and Predict, the
// training loop, gradient accumulation and clipping, validation scheduling,
// logging of metrics, and the hooks of modules and callbacks.
//
// Fine-tuning (finetune.go): Fit(..., WithWeights(path)) starts a Fit from
// the weights of a file, as Lightning's model.load_state_dict before
// trainer.fit: a safetensors state dict PyTorch wrote
// (safetensors.torch.save_file(model.state_dict(), path)), infer's
// SaveStateDict, or a fulgur checkpoint, whose optimizer and position are
// ignored. The optimizer is fresh and the Fit starts at epoch 0:
//
//	tr, _ := trainer.New(trainer.Config{MaxEpochs: 1})
//	err := tr.Fit(ctx, m, train, val, trainer.WithWeights("weights.safetensors"))
//
// Strict(false) skips the tensors that do not match by name (logged),
// OnlyPrefix("backbone.") loads only those under a prefix, and
// StripPrefix("module.") first removes a wrapper's prefix from the file's
// names (the state_dict() of a DistributedDataParallel model), as PyTorch's
// consume_prefix_in_state_dict_if_present.
//
// Checkpoints (checkpoint.go) are safetensors files holding the model's
// tensors plus the optimizer, scheduler, callback states and the loop
// position in checksummed metadata; Fit(..., FromCheckpoint(path)) resumes
// exactly where the run stood: its position (epoch, batch, step and the
// epoch's aggregates) is the run's as soon as the checkpoint is restored,
// so OnFitStart already sees the restored State.Epoch and GlobalStep, and
// a checkpoint saved there holds them (Lightning restores its loops after
// on_fit_start, where its current_epoch and global_step are still 0; from
// on_train_start on they are the restored ones, as here). ckptfile.go is how a save meets the disk:
// through a locked temporary file renamed over the target, so a full disk
// or a kill leaves the previous checkpoint whole; the next Fit removes the
// temporary files of interrupted saves and fails before the first step
// when rank 0 cannot write the run directory. SIGINT and SIGTERM during Fit (signal.go)
// finish the step, save a checkpoint and stop every rank. With several
// ranks, every rank learns after each step whether any asked to stop (a
// hook's Stop, a signal, a cancelled context): by a small all-reduce of
// their stop flags, or, with ddp when no module or callback may stop after
// the backward pass (StepEndStopper), with the flags riding in the step's
// last gradient all-reduce, sampled as it is queued. A signal or a cancel
// after the ranks' last such agreement (in the validation and checkpoints
// of an epoch a Stop ended, in OnTrainEnd) stops the Fit as an interrupt
// all the same, checked once more after OnTrainEnd (agreeend.go); a
// signal during OnFitStart or the setup before it, at the first
// agreement; one during OnFitEnd or Teardown, once they ran (Fit watches
// for signals from its setup to the agreement after its end hooks: a
// signal outside the loop no longer kills the process in a hook, its work
// undone). The
// hooks that end a Fit (OnTrainEnd, OnFitEnd, Teardown) get the caller's
// context, cancellation included, on every strategy; when one fails on
// one rank, every rank's Fit fails naming it, as every rank's Validate,
// Test, Predict or PredictEach does when one rank's loop fails or is
// cancelled (under strategies holding the whole model in each process).
// The same signal again within DuplicateSignalWindow is the same request;
// after it, the process exits at once, leaving a checkpoint being written
// unfinished (its temporary file, never "last"). Under an elastic
// launcher (elastic.go; "fulgur run", FULGUR_MAX_RESTARTS) a restarted Fit
// goes on in the job's run directory from its newest last.ckpt, at any
// world size.
//
// The trainer reaches replicas only through strategy.Strategy and never
// switches on a strategy's type. dispatch.go is the only caller of hooks; it
// opens a profiler span named after each hook and wraps its error with that
// name. Callbacks receive a read-only State (a copy, with views of metrics
// and weights), never the Trainer.
//
// The loop is in parts: loop.go (epochs, the batches of an epoch, the
// epoch's end), step.go (one batch: forward and backward, the optimizer
// step and its hooks, step logs), accumulate.go (accumulation windows),
// valsched.go (when validation runs) and signal.go (ranks agreeing on a
// stop). Config.Validate rejects settings that would ignore each other
// (config_conflicts.go).
//
// The errors and log lines of the trainer and the strategies name a
// Config field (and a WeightsOption) through Config.SettingName, which the
// strategies get as strategy.Options.SettingName: nil names the Go field
// ("MinEpochs is 5 and MaxEpochs 2"); a command line built over the trainer
// gives its flags ("-min-epochs is 5 and -max-epochs 2", as package cli
// does). Only the trainer's own words go through it: an error of a module
// or a callback, which the trainer wraps with %w, keeps its text, so no
// finished message is ever rewritten.
//
// # Hooks
//
// Callbacks implement the hooks they want, each a one-method interface
// (callback.go, hooks.go); a module implements those of package module.
// A method named as a hook (or an optional step) with another signature
// would never be called: New refuses such a callback or logger, and Fit,
// Validate, Test and Predict such a module, naming both signatures
// (hookcheck.go).
// Each hook runs on the callbacks first, in Config.Callbacks' order, then on
// the module, as Lightning 2.x calls callbacks before the LightningModule;
// the sanity check's and OnException exist for callbacks only, the
// checkpoint's for the module only (a callback's state is Stateful's).
// Fit, Validate, Test and Predict call them in the order of Lightning
// 2.x's loops:
//
//	Fit:
//	  Setup("fit") (SetupHook; module.SetUpper), once the strategy is set up
//	  and before a checkpoint is restored (the module's OnLoadCheckpoint)
//	  OnFitStart
//	  sanity check (Config.NumSanityValSteps batches; not with DisableSanityCheck,
//	  FastDevRun, no validation loader, or nothing left to train):
//	    OnSanityCheckStart, the validation loop below with
//	    State.SanityChecking set, OnSanityCheckEnd
//	  OnTrainStart (not when nothing is left to train)
//	  for each epoch:
//	    OnTrainEpochStart
//	    for each batch:
//	      OnTrainBatchStart
//	      TrainingStep's forward pass, OnBeforeZeroGrad (at an accumulation
//	      window's first batch), OnBeforeBackward, backward pass
//	      inside a window: OnAfterBackward
//	      when the batch closes the window: the gradients reduced across
//	      ranks, OnAfterBackward, OnBeforeOptimizerStep, clipping,
//	      optimizer step, OnAfterOptimizerStep
//	      OnTrainBatchEnd
//	      the validation loop, when ValCheckInterval has it due
//	    the validation loop, at the epochs CheckValEveryNEpoch selects
//	    OnTrainEpochEnd
//	  OnTrainEnd (after the last epoch or a Stop)
//	  OnFitEnd
//	  Teardown("fit") (TeardownHook; module.TearDowner)
//	each checkpoint written: the module's OnSaveCheckpoint (every rank)
//	Validate, Test, Predict and PredictEach: Setup(stage), then the
//	  module's OnLoadCheckpoint with WithCheckpoint, their loop below,
//	  Teardown(stage)
//	validation loop (in Fit, the sanity check and Validate):
//	  OnValidationStart, OnValidationEpochStart
//	  for each batch: OnValidationBatchStart, ValidationStep, OnValidationBatchEnd
//	  OnValidationEpochEnd, OnValidationEnd (the loop's metrics, reduced
//	  across ranks, in State.Metrics; a Fit's are logged before them)
//	Test: OnTestStart, OnTestEpochStart, for each batch OnTestBatchStart,
//	  TestStep, OnTestBatchEnd; OnTestEpochEnd, OnTestEnd
//	Predict and PredictEach: OnPredictStart, OnPredictEpochStart, for each
//	  batch OnPredictBatchStart, PredictStep, PredictEach's fn,
//	  OnPredictBatchEnd; OnPredictEpochEnd, OnPredictEnd
//	a call that fails: OnException, with its error, and no hook after it
//	  (no Teardown, as in Lightning)
//
// Every rank runs every hook (ddp, sharded, fsdp; dp is one process): with
// ddp_spawn that is each worker, for Fit, and the launching process runs
// Validate, Test and Predict, and OnException when Fit fails there. A hook's
// error ends the call with an error naming it
// ("callbacks/ModelCheckpoint.OnValidationEnd: ...", "module.OnTrainStart:
// ..."). A panic in a hook, or in an ability a callback or the module
// answers (StopsAtStepEnd, DisplaysProgress, WantsLayerShapes), is such an
// error of New or of the call, with the user's line. A Stop asked in a
// training batch's hooks (OnTrainBatchStart included) ends the epoch at that
// batch's end, every rank agreeing, and the epoch's end runs there as
// Lightning's does once should_stop is set: the epoch metrics of the batches
// that ran (train_loss_epoch), the validation when the epoch is one that
// validates, OnTrainEpochEnd and the default checkpoints, once; then
// OnTrainEnd. An epoch stopped before its last batch keeps its place in
// those checkpoints (a resume trains the rest of it) and does not step a
// per-epoch scheduler; inside an accumulation window it skips the validation
// and the checkpoints, with a warning. One asked in a validation's ends the
// validation at the end of its epoch (the rest of its batches skipped),
// every rank agreeing, then the training epoch as above; one from
// OnFitStart, the sanity check or OnTrainStart ends the Fit before the first
// epoch and one from OnTrainEpochStart before that epoch's first batch,
// every rank agreeing there too. Config.MinEpochs and MinSteps hold any
// of these off, as Lightning's min_epochs and min_steps: training goes on
// until both are met and stops at that batch end or epoch end. It means
// nothing to Validate, Test and Predict, which run to their end. Hooks nobody implements cost nothing: the
// per-batch ones are looked up once per call, not per batch.
//
// The sanity check calls the validation hooks as Lightning's does, with
// State.SanityChecking set and its metrics in State.Metrics, for those
// hooks only: they reach no logger (nor does what a callback logs during
// the check), and the metrics are as before the check once it ends.
// ModelCheckpoint, EarlyStopping and ProgressBar do nothing then; a
// callback of one's own that acts on a Fit's validation metrics returns
// early while State.SanityChecking is set, as it would check
// trainer.sanity_checking in Lightning.
//
// # Loop settings and Lightning's
//
// Config's loop settings are Lightning 2.x's Trainer flags, with these
// deliberate differences:
//
//   - ValCheckInterval is a count of training batches only (no fraction of
//     the epoch, no count across epochs as with check_val_every_n_epoch=None),
//     and the epochs CheckValEveryNEpoch selects validate at their end as
//     well (Lightning's int interval validates at its multiples only), so
//     that every such epoch ends validated for its checkpoints and
//     schedulers; an interval beyond the epoch is a warning, where Lightning
//     raises an error.
//   - LimitTrainBatches, LimitValBatches, LimitTestBatches and
//     LimitPredictBatches are counts, 0 meaning all (Lightning's 0 means
//     none, and a float is a fraction): to skip validation, pass no
//     validation loader.
//   - NumSanityValSteps 0 is the default, 2; DisableSanityCheck is
//     Lightning's num_sanity_val_steps=0. The sanity check runs on a
//     resumed Fit too (Lightning skips it when it restores its loops).
//   - MaxEpochs 0 and MaxSteps 0 are the defaults (1000 epochs, no step
//     limit), not Lightning's "train nothing"; Lightning's max_epochs=-1
//     is -1 here too, its max_steps=-1 is 0.
//   - LogEveryNSteps 0 is the default, 50 (Lightning's 0 logs no step). A
//     step row's step is the global step after it (Lightning writes the
//     count before it, one less).
//   - A Fit that MaxSteps ends within an epoch runs that epoch's end with
//     its validation (Lightning validates there only at a validation
//     interval).
//   - OverfitBatches limits the test batches too and excludes FastDevRun;
//     FastDevRun keeps the loggers (Lightning swaps them for a dummy).
//   - MinSteps alone holds a Stop until its step (Lightning's min_steps
//     also implies min_epochs=1). A callbacks.Timer leaves MaxEpochs'
//     default of 1000 as it is (Lightning's max_time lifts it): set -1.
//
// Equal to Lightning: CheckValEveryNEpoch; the limits as counts and the
// sanity check's batches within LimitValBatches (-1: all); MaxSteps and
// MinSteps in optimizer steps with AccumulateGradBatches; an epoch whose
// batch count is not a multiple of it steps on its last, partial window,
// its gradients divided by AccumulateGradBatches as Lightning's loss is;
// FastDevRun's overrides; a Stop validates the epoch it ends;
// GradientClipVal by "norm" (torch's clip_grad_norm_, with its 1e-6) and
// "value", after accumulation.
//
// # Errors
//
// An error says what went wrong in words a user acts on. Those a program
// branches on match errors.Is or errors.As through the trainer's wrapping:
//
//   - *InterruptedError (errors.As): a signal or the caller's context
//     stopped Fit after a whole step, and its Checkpoint resumes the run;
//     errors.Is(err, context.Canceled) (or context.DeadlineExceeded)
//     holds when the context did. Validate, Test, Predict and PredictEach
//     stopped by their context return its error wrapped, and so does a Fit
//     cancelled inside a gradient accumulation window, which no checkpoint
//     can resume (its error says so).
//   - ErrCorruptCheckpoint: a checkpoint given to FromCheckpoint or
//     WithCheckpoint (or read by LoadWeights, VerifyCheckpoint or
//     ReadCheckpointInfo) is cut short, altered or no checkpoint; a
//     missing one matches os.ErrNotExist instead.
//   - collective.ErrPeerLost and collective.ErrTimeout, in a *collective.Error
//     (collective.PeerOf names the rank): a Fit of several ranks lost a
//     rank that died, closed or went silent.
//
// New's error lists every problem of a Config at once, naming each
// setting, its value and the fix; it has no sentinel. A hook's Stop is no
// error: Fit returns nil and Stats().StoppedEarly says why.
//
// trainer imports module, data, optim, nn, profiler, strategy, blas (the BLAS
// choice at start), panics (user panics as errors) and internal/typednil
// (the typed-nil test data and infer make too); it must not be imported by
// any of them.
package trainer
