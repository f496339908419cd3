package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"
)

// results is everything measured, as written to results.json.
type results struct {
	Started     time.Time           `json:"started"`
	Finished    time.Time           `json:"finished"`
	Settings    settings            `json:"settings"`
	Controllers []controllerResults `json:"controllers"`
	// Limit holds one raw-client cold start per --foos size.
	Limit []coldStart `json:"limit"`
	// LimitReactions are the reaction case's limit, one per rate: the bench itself
	// makes the Deployment and status writes as soon as each patch returns.
	LimitReactions []reaction `json:"limitReactions,omitempty"`
}

// settings are the flags that shape the figures.
type settings struct {
	Foos                 []int    `json:"foos"`
	SteadyFoos           int      `json:"steadyFoos"`
	UnrelatedDeployments int      `json:"unrelatedDeployments"`
	Rates                []int    `json:"rates"`
	ReactionSeconds      float64  `json:"reactionSeconds"`
	ReactionDeadlineSecs float64  `json:"reactionDeadlineSeconds"`
	SteadyWindowSeconds  float64  `json:"steadyWindowSeconds"`
	SettleSeconds        float64  `json:"settleSeconds"`
	LimitWorkers         int      `json:"limitWorkers"`
	ColdStartTimeoutSecs float64  `json:"coldStartTimeoutSeconds"`
	Cases                []string `json:"cases"`
}

// controllerResults are one controller's figures.
type controllerResults struct {
	Name       string      `json:"name"`
	Binary     string      `json:"binary"`
	Args       []string    `json:"args"`
	StatusRule string      `json:"statusRule"`
	ColdStarts []coldStart `json:"coldStarts"`
	Steady     *steady     `json:"steady,omitempty"`
	Memory     *memory     `json:"memory,omitempty"`
	Reactions  []reaction  `json:"reactions,omitempty"`
	// Skipped says why the steady-state, memory and reaction cases did not run.
	Skipped string `json:"skipped,omitempty"`
}

func newResults(cfg config, controllers []controllerSpec) *results {
	res := &results{
		Started: time.Now(),
		Settings: settings{
			Foos:                 cfg.foos,
			SteadyFoos:           cfg.steadyFoos,
			UnrelatedDeployments: cfg.unrelated,
			Rates:                cfg.rates,
			ReactionSeconds:      cfg.reactionDuration.Seconds(),
			ReactionDeadlineSecs: cfg.reactionDeadline.Seconds(),
			SteadyWindowSeconds:  cfg.steadyWindow.Seconds(),
			SettleSeconds:        cfg.settle.Seconds(),
			LimitWorkers:         cfg.workers,
			ColdStartTimeoutSecs: cfg.coldStartTimeout.Seconds(),
		},
	}
	for _, c := range allCases {
		if cfg.cases[c] {
			res.Settings.Cases = append(res.Settings.Cases, c)
		}
	}
	for _, c := range controllers {
		res.Controllers = append(res.Controllers, controllerResults{
			Name: c.name, Binary: c.binary, Args: c.args, StatusRule: c.rule.String(),
		})
	}
	return res
}

// writeOutputs writes results.json to dir.
func writeOutputs(dir string, res *results) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "results.json")
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return err
	}
	progressf("wrote %s", path)
	return nil
}
