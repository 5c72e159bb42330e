package trainer

// SetSignalRecordHook hands f the signal watcher's recording of the first
// signal of a Fit, to run when it likes or never (nil: the watcher records
// it at once), for the tests of package trainer_test.
func SetSignalRecordHook(f func(record func())) { testHookRecordSignal = f }
