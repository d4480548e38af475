;; Director-Evaluator: draft a paragraph, have it judged, draft it again with
;; the judge's feedback until the judge accepts it (three tries at most).
;;
;;   steward task run examples/tasks/director-evaluator.sexp \
;;     --templates examples/tasks/templates --arg topic=owls \
;;     --script examples/tasks/director-evaluator.script.yaml

(director-evaluator-loop
  (max-iterations 3)
  (initial-director-input "Write it for a child.")
  ;; the director turns the feedback so far into the brief of the next draft
  (director (lambda (brief iteration) brief))
  ;; the executor writes the draft (an atomic call of templates/draft.toml)
  (executor (lambda (brief iteration) (draft topic brief)))
  ;; the evaluator judges it (templates/judge.yaml): its notes say accept or revise
  (evaluator (lambda (text brief iteration) (judge topic text)))
  ;; the controller stops with the accepted draft, or goes on with the feedback
  (controller
    (lambda (verdict brief text iteration)
      (if (string=? (get-field verdict "verdict") "accept")
          (stop text)
          (continue (concat brief " " (content verdict)))))))
