//go:build !linux

package callbacks

// ReadProcessSample is not available here: pass DeviceStatsConfig.Sample.
func ReadProcessSample() (ProcessSample, error) { return ProcessSample{}, errNoProcStats }
