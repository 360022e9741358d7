package planner

import "errors"

// Largest is the longest context (prompt + max_tokens per slot) a worker can plan for jobs
// with policy and slots, and the configuration it would use at that length. Need grows with
// context alone for the cheapest configuration the policy allows, so a job fits the worker
// exactly when its prompt tokens + max_tokens ≤ Largest(…).Context; that is what a fleet
// routes on. Context is 0 when the worker cannot hold the model at all.
func Largest(policy Policy, slots int, p Profile, c Calibration, b Budget) (Config, error) {
	if p.ContextLength < 2 {
		return Config{}, errors.Join(ErrBadProfile, errors.New("trained context below 2 tokens"))
	}
	job := Job{PromptTokens: 1, MaxTokens: p.ContextLength - 1, Slots: slots, Policy: policy}
	plan, err := Choose(job, p, c, b)
	if err == nil {
		return plan.Config, nil
	}
	var dnf *DoesNotFitError
	if errors.As(err, &dnf) {
		return dnf.Largest, nil
	}
	return Config{}, err
}
